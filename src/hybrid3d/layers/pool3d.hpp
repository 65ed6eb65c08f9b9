// MaxPool3d / AvgPool3d: kernel 2 stride 2 (no halo), or kernel 3 stride 2
// padding 1 (halo of 1 before each block). Max ignores padding (-inf);
// average counts it (PyTorch's count_include_pad=True): y = sum(window)/k^3.
// Backward: max routes dy to the first maximum of each window, average
// spreads dy/k^3; gradients of halo cells go back to their owners
// (--deterministic: average pooling computes dx on the own block from a
// halo of dy; max pooling with overlapping windows is refused there).
#pragma once
#include "hybrid3d/layers/deterministic.hpp"
#include "hybrid3d/layers/window_layer.hpp"

namespace h3d {

class Pool3d : public Layer {
 public:
  Pool3d(std::string name, PoolKind kind, int kernel, int stride, int padding);
  ActShape setup(const ActShape& in, const ProcessGrid& grid) override;
  void forward(StepContext& ctx, const Tensor& x, Tensor& y) override;
  void backward(StepContext& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
  void forward_consuming(StepContext& ctx, Tensor& x, Tensor& y) override;
  // Max pooling whose windows tile its own block (kernel = stride, no
  // padding, no halo): dx is written over x, each window read before it is
  // written (the backends allow it, backend.hpp). Cosmoflow's first pooling
  // then takes no new buffer of its input's size at the step's peak.
  void backward_consuming_input(StepContext& ctx, Tensor& x, const Tensor& y, Tensor& dy, Tensor& dx) override;
  void backward_consuming(StepContext& ctx, const Tensor& x, const Tensor& y, Tensor& dy, Tensor& dx) override;
  // Average pooling's gradient needs no values; max pooling finds its
  // maxima again in the input (its padded copy, or x itself).
  bool backward_reads_input() const override {
    return !pass_through_ && kind_ == PoolKind::kMax && input_.trivial();
  }
  bool backward_reads_output() const override { return false; }
  int64_t input_capacity_wish(int64_t n) const override {
    return pad_in_kernel_ || pass_through_ ? 0 : input_.input_capacity(n * channels_);
  }
  bool in_place() const override { return pass_through_; }
  void release_saved() override { input_.release(); }
  // Max pooling whose windows tile its own block: its backward finds each
  // window's maximum in x, the ReLU's output, and applies the ReLU's
  // gradient there (PoolDesc::relu_grad_slope).
  bool absorb_relu_grad(float slope) override {
    if (!windows_tile_input()) return false;
    relu_grad_slope_ = slope;
    return true;
  }
  int64_t downsampling() const override { return w_.s; }
  PoolKind kind() const { return kind_; }
  const Window1D& window() const { return w_; }
  // The convolution before computes this pooling's output itself
  // (Conv3d::stream_through): forward passes its input on, backward its
  // gradient.
  void set_pass_through() { pass_through_ = true; }

 private:
  PoolDesc desc(int64_t n) const;
  bool windows_tile_input() const;
  void run_forward(StepContext& ctx, const Tensor& xp, Tensor& y);
  PoolKind kind_;
  Window1D w_;
  int64_t channels_ = 0;
  PaddedInput input_;
  bool own_block_grad_ = false;  // --deterministic with a halo: dx via own_grad_
  // Average pooling whose only halo is the global edge's zero padding: the
  // kernel pads by itself and reads x and writes dx where they are, with no
  // padded copy in and no gradient copied out (the same bits: cpu_pool.cpp).
  // Not with --deterministic, whose paths stay as they were.
  bool pad_in_kernel_ = false;
  float relu_grad_slope_ = -1.0f;  // >= 0: the ReLU before it, fused (absorb_relu_grad)
  bool pass_through_ = false;
  OwnInputGrad own_grad_;
  std::array<int64_t, 3> out_ext_{}, in_ext_{};
  int64_t n_ = 0;  // samples of the last forward
};

}  // namespace h3d
