// MaxPool3d / AvgPool3d: kernel 2 stride 2 (no halo), or kernel 3 stride 2
// padding 1 (halo of 1 before each block). Max ignores padding (-inf);
// average counts it (PyTorch's count_include_pad=True): y = sum(window)/k^3.
// Backward: max routes dy to the first maximum of each window, average
// spreads dy/k^3; gradients of halo cells go back to their owners.
#pragma once
#include "hybrid3d/layers/window_layer.hpp"

namespace h3d {

class Pool3d : public Layer {
 public:
  Pool3d(std::string name, PoolKind kind, int kernel, int stride, int padding);
  ActShape setup(const ActShape& in, const ProcessGrid& grid) override;
  void forward(StepContext& ctx, const Tensor& x, Tensor& y) override;
  void backward(StepContext& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;

 private:
  PoolDesc desc(int64_t n) const;
  PoolKind kind_;
  Window1D w_;
  int64_t channels_ = 0;
  PaddedInput input_;
  std::array<int64_t, 3> out_ext_{};
};

}  // namespace h3d
