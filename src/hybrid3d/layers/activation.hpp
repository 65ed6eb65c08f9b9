// Pointwise activations: ReLU, LeakyReLU(slope), Tanh, scaled tanh
// (param * tanh, CosmoFlow's 1.2*tanh output) and scaling (param * x).
// Work on spatial and dense tensors alike; no communication. The gradient is
// taken from the output alone (for the ReLUs sign(y) == sign(x)), so the
// input need not be kept.
#pragma once
#include "hybrid3d/layers/layer.hpp"

namespace h3d {

class Activation : public Layer {
 public:
  Activation(std::string name, ActKind kind, float param = 0.0f) : Layer(std::move(name)), kind_(kind), p_(param) {}
  ActShape setup(const ActShape& in, const ProcessGrid&) override { return in; }
  void forward(StepContext& ctx, const Tensor& x, Tensor& y) override {
    y.reshape_like(x.shape());
    ctx.backend->activation_forward(kind_, p_, x.data(), y.data(), x.numel());
  }
  void backward(StepContext& ctx, const Tensor&, const Tensor& y, const Tensor& dy, Tensor& dx) override {
    dx.reshape_like(dy.shape());
    ctx.backend->activation_backward(kind_, p_, y.data(), dy.data(), dx.data(), dy.numel());
  }

 private:
  ActKind kind_;
  float p_;
};

}  // namespace h3d
