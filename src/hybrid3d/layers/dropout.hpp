// Dropout(p): y = x * mask / (1 - p) in training, y = x in evaluation.
// The mask bit of an element is a pure function of (seed, layer, step,
// position of the sample in the global mini-batch, global element index in
// PyTorch's flatten order (C, D, H, W)), so it is the same whatever the
// layout. Works on spatial and dense tensors.
#pragma once
#include "hybrid3d/layers/layer.hpp"

namespace h3d {

class Dropout : public Layer {
 public:
  Dropout(std::string name, float p);
  ActShape setup(const ActShape& in, const ProcessGrid& grid) override;
  void forward(StepContext& ctx, const Tensor& x, Tensor& y) override;
  void backward(StepContext& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
  // The mask is a function of (seed, step, position): nothing is kept, and
  // both directions run in place when allowed.
  void forward_consuming(StepContext& ctx, Tensor& x, Tensor& y) override;
  void backward_consuming(StepContext& ctx, const Tensor& x, const Tensor& y, Tensor& dy, Tensor& dx) override;
  bool backward_reads_input() const override { return false; }
  bool in_place() const override { return true; }
  bool backward_reads_output() const override { return false; }

 private:
  void apply(const StepContext& ctx, const Tensor& in, Tensor& out) const;
  float p_;
  uint64_t stream_;
  ActShape shape_;
  Box box_;  // spatial: my block
};

}  // namespace h3d
