// Pointwise activations: ReLU, LeakyReLU(slope), Tanh, scaled tanh
// (param * tanh, CosmoFlow's 1.2*tanh output) and scaling (param * x).
// Work on spatial and dense tensors alike; no communication.
//
// Memory: the gradient is taken from the output alone (for the ReLUs
// sign(y) == sign(x)), so the input is never kept and the forward runs in
// place when the network allows. The ReLUs keep even less: in training they
// record the sign of each output as one bit, so their output may be consumed
// by the next layer (a pooling layer growing it into its halo-padded copy).
// A leaky ReLU right after a layer that can apply it itself (a convolution:
// Network::setup offers it) is absorbed: its forward then only records the
// signs, and its backward is unchanged.
#pragma once
#include <vector>

#include "hybrid3d/layers/layer.hpp"

namespace h3d {

class Activation : public Layer {
 public:
  Activation(std::string name, ActKind kind, float param = 0.0f) : Layer(std::move(name)), kind_(kind), p_(param) {}
  ActShape setup(const ActShape& in, const ProcessGrid&) override { return in; }
  void forward(StepContext& ctx, const Tensor& x, Tensor& y) override;
  void backward(StepContext& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
  void forward_consuming(StepContext& ctx, Tensor& x, Tensor& y) override;
  void backward_consuming(StepContext& ctx, const Tensor& x, const Tensor& y, Tensor& dy, Tensor& dx) override;
  bool backward_reads_input() const override { return false; }
  bool in_place() const override { return true; }
  bool backward_reads_output() const override { return !sign_mask_kind(); }
  void release_saved() override { mask_.release(); }
  // A leaky ReLU with a positive slope, which the layer before it may apply
  // (plain ReLU is not: a fused kernel writes -0 where the reference writes 0).
  bool absorbable() const { return kind_ == ActKind::kLeakyRelu && p_ > 0.0f; }
  float slope() const { return p_; }
  // The layer before applies this activation to its output.
  void set_absorbed(bool absorbed) { absorbed_ = absorbed; }
  bool absorbed() const { return absorbed_; }
  // A ReLU (plain, or leaky with a slope >= 0) whose gradient the layer
  // after it may apply: that slope (0 for plain ReLU), else -1.
  float relu_grad_slope() const {
    if (kind_ == ActKind::kRelu) return 0.0f;
    return kind_ == ActKind::kLeakyRelu && p_ >= 0.0f ? p_ : -1.0f;
  }
  // The layer after applies this activation's gradient in its backward:
  // this one keeps no sign mask and passes its gradient through.
  void set_grad_absorbed(bool absorbed) { grad_absorbed_ = absorbed; }

 private:
  bool sign_mask_kind() const { return kind_ == ActKind::kRelu || kind_ == ActKind::kLeakyRelu; }
  // y may be x (in place).
  void apply(StepContext& ctx, const float* x, Tensor& y);
  void apply_grad(StepContext& ctx, const Tensor& y, const float* dy, Tensor& dx);
  ActKind kind_;
  float p_;
  bool absorbed_ = false, grad_absorbed_ = false;
  // Bit i: output i > 0 (ReLUs, training). A tensor of the backend's
  // allocator, so that the mask lives where the activations do.
  Tensor mask_;
  uint64_t* mask_words() { return reinterpret_cast<uint64_t*>(mask_.data()); }
};

}  // namespace h3d
