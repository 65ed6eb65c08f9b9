// Conv3d: y[n, o, z] = b[o] + sum_{i, t} w[o, i, t] * x[n, i, z*s + t - p_lo]
// x: [n, Cin, block], w: [Cout, Cin, k, k, k] (PyTorch's layout), b: [Cout].
// Kernel 1..5, stride 1 or 2, padding valid / half (k/2) / same; bias optional.
// Halo: what the padded window reaches outside the own block (see
// Distribution). Backward: dx on the padded box, halo part sent back and
// added by its owners; dw and db are partial sums over the own outputs.
// --deterministic: dw and db are summed exactly on fixed tiles, and dx is
// computed on the own block from a halo of dy (layers/deterministic.hpp).
#pragma once
#include <memory>

#include "hybrid3d/layers/conv_pool_stream.hpp"
#include "hybrid3d/layers/deterministic.hpp"
#include "hybrid3d/layers/pool3d.hpp"
#include "hybrid3d/layers/window_layer.hpp"

namespace h3d {

struct Conv3dOptions {
  int64_t in_channels = 1, out_channels = 1;
  int kernel = 3, stride = 1;
  Padding padding = Padding::kHalf;
  bool bias = true;
};

class Conv3d : public Layer {
 public:
  Conv3d(std::string name, Conv3dOptions o, uint64_t seed);
  ActShape setup(const ActShape& in, const ProcessGrid& grid) override;
  void forward(StepContext& ctx, const Tensor& x, Tensor& y) override;
  void backward(StepContext& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
  void forward_consuming(StepContext& ctx, Tensor& x, Tensor& y) override;
  // Backward reads the padded copy it keeps, or x itself when there is none.
  bool backward_reads_input() const override { return input_.trivial(); }
  bool backward_reads_output() const override { return false; }
  int64_t input_capacity_wish(int64_t n) const override { return input_.input_capacity(n * o_.in_channels); }
  void release_saved() override {
    input_.release();
    if (stream_) stream_->release();
  }
  std::vector<Param*> params() override;
  const Conv3dOptions& options() const { return o_; }
  int64_t downsampling() const override { return o_.stride; }
  // The backend applies it in the kernel that writes the output
  // (ConvDesc::fused_leaky_slope).
  bool absorb_leaky_relu(float slope) override {
    fused_leaky_slope_ = slope;
    return true;
  }
  // The slope of the leaky ReLU this layer applies to its output; 0: none.
  float fused_leaky_slope() const { return fused_leaky_slope_; }
  // Fusion (Network::setup): as the network's first layer, followed by an
  // average pooling (through the leaky ReLU it absorbed), this layer may
  // compute that pooling's output itself, slab by slab
  // (layers/conv_pool_stream.hpp); `pool_out` is the pooling's output
  // shape. Returns whether it does; the pooling then passes its input on.
  // Not with --deterministic (its exact tile sums stay as they are).
  bool stream_through(const Pool3d& pool, const ActShape& pool_out, int spatial_rank);
  bool streams() const { return stream_ != nullptr; }

 private:
  ConvDesc desc(int64_t n) const;
  // The forward of both entry points; x is consumed when `consumable` is x.
  void forward_overlapped(StepContext& ctx, const Tensor& x, Tensor* consumable, Tensor& y);
  void backward_deterministic(StepContext& ctx, const Tensor& x, const Tensor& dy, Tensor& dx);
  void backward_streamed(StepContext& ctx, const Tensor& x, const Tensor& dy, Tensor& dx);
  Conv3dOptions o_;
  Param weight_, bias_;
  PaddedInput input_;
  bool deterministic_ = false;
  std::vector<Box> out_tiles_;  // --deterministic: this rank's output tiles
  OwnInputGrad own_grad_;
  ExactSum weight_sum_;
  std::array<int64_t, 3> out_ext_{}, in_ext_{};
  Distribution in_dist_, out_dist_;
  std::unique_ptr<ConvPoolStream> stream_;
  std::array<int64_t, 3> stream_out_ext_{};  // the pooling's output block, when streaming
  int64_t n_ = 0;  // samples of the last forward
  float fused_leaky_slope_ = 0.0f;
};

}  // namespace h3d
