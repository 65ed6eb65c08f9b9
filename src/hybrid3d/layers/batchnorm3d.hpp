// BatchNorm3d over the whole global mini-batch: per channel c,
//   mean = sum(x)/M, var = sum(x^2)/M - mean^2 with M = batch * D*H*W,
// the sums taken over every block of every data group (one allreduce of
// 2C doubles per forward, one more per backward).
//   y = gamma * (x - mean) / sqrt(var + eps) + beta
// Running statistics as PyTorch: momentum 0.1, unbiased variance, eps 1e-5;
// evaluation uses them and needs no communication. gamma/beta gradients are
// complete (global) after the backward allreduce. --deterministic: the sums
// are formed per sample and fixed tile and added exactly.
#pragma once
#include "hybrid3d/layers/layer.hpp"

namespace h3d {

class BatchNorm3d : public Layer {
 public:
  BatchNorm3d(std::string name, int64_t channels, double momentum = 0.1, double eps = 1e-5);
  ActShape setup(const ActShape& in, const ProcessGrid& grid) override;
  void forward(StepContext& ctx, const Tensor& x, Tensor& y) override;
  void backward(StepContext& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
  bool backward_reads_output() const override { return false; }
  std::vector<Param*> params() override { return {&gamma_, &beta_}; }
  std::vector<StateBuffer*> buffers() override { return {&running_mean_, &running_var_, &batches_}; }

 private:
  // s[0, 2C): per channel sum(x), sum(x^2) (no dy) or sum(dy),
  // sum(dy (x - mean)), over the global batch; s[2C]: its sample count.
  void global_sums(StepContext& ctx, const Tensor& x, const Tensor* dy, std::vector<double>& s) const;
  int64_t c_;
  double momentum_, eps_;
  bool deterministic_ = false;
  std::vector<Box> tiles_;      // --deterministic: this rank's tiles
  std::array<int64_t, 3> ext_{};  // the rank's block
  int64_t global_volume_ = 0;
  Param gamma_, beta_;
  StateBuffer running_mean_, running_var_, batches_;
  std::vector<float> mean_, invstd_;  // of the last training forward
};

}  // namespace h3d
