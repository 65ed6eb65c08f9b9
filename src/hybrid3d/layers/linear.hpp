// Linear: y[n, o] = b[o] + sum_f W[o, f] x[n, f], W: [out, in] (PyTorch's layout).
//
// On a dense input (the head) it is computed identically on every rank of
// a spatial group, and its gradients are group-replicated.
//
// On a spatial input it is Flatten + Linear in one, by partial products
// (LBANN's distributed fully connected layer): each rank multiplies its own
// block (flattened in PyTorch's (C, D, H, W) order, so its features are a
// scattered subset of the columns of W) by those columns, and one allreduce
// of [n, out] over the group sums the parts. No rank ever gathers the whole
// activation, and W is held in parts (Param::part): each rank keeps only
// its own columns, so the weight, its gradient and its optimizer state
// shrink with the group (an eighth on 8 ranks). dW = dy^T x of the own
// columns is complete within the group (only the data groups' sums remain),
// and dx = dy W[:, own] needs no communication.
//
// --deterministic: one sample at a time, and on a spatial input one fixed
// tile at a time; the tiles' partial products, and dW and db over the
// samples, are added exactly (layers/deterministic.hpp).
#pragma once
#include "hybrid3d/parallel/exact_sum.hpp"
#include "hybrid3d/layers/layer.hpp"

namespace h3d {

class Linear : public Layer {
 public:
  Linear(std::string name, int64_t in_features, int64_t out_features, uint64_t seed);
  ActShape setup(const ActShape& in, const ProcessGrid& grid) override;
  void forward(StepContext& ctx, const Tensor& x, Tensor& y) override;
  void backward(StepContext& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
  bool backward_reads_output() const override { return false; }
  std::vector<Param*> params() override { return {&weight_, &bias_}; }

 private:
  // Keeps only W[:, columns_] (a part, if the group has several ranks).
  void hold_own_columns();
  void forward_deterministic(StepContext& ctx, const Tensor& x, Tensor& y);
  void backward_deterministic(StepContext& ctx, const Tensor& x, const Tensor& dy, Tensor& dx);
  // --deterministic: the input's features in pieces that are the same under
  // every layout (a tile each, or all features of a dense input).
  struct Piece {
    std::vector<int64_t> local;  // index in the rank's flattened sample
    Tensor w;                    // W[:, the piece's columns], per forward
  };
  bool deterministic_ = false;
  std::vector<Piece> pieces_;
  ExactSum dw_sum_;  // kept: its 16-byte sums of every weight are not reallocated per step
  int64_t in_, out_;
  Param weight_, bias_;
  bool spatial_ = false;
  std::vector<int64_t> columns_;  // global flatten index of each local feature
};

}  // namespace h3d
