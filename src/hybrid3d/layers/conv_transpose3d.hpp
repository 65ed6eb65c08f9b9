// ConvTranspose3d (PyTorch's): y[n, o, z] = b[o] + sum_{i, t : z = x_idx*s - p + t} w[i, o, t] * x[n, i, x_idx]
// x: [n, Cin, block], w: [Cin, Cout, k, k, k] (PyTorch's ConvTranspose3d
// layout), b: [Cout]. Output extent (N - 1) * s - 2p + k + output_padding;
// U-Net's two upsamplings: kernel 2 stride 2, and kernel 3 stride 2
// padding 1 output padding 1, both doubling the extent.
//
// It is the adjoint of the Conv3d that maps the output space back to the
// input space with the same kernel, stride and padding, and PyTorch's
// weight layout is exactly that convolution's [Cout_conv = Cin, Cin_conv =
// Cout, k, k, k]. So, on the conv machinery:
//  - forward = that conv's backward-data: each rank computes the
//    contributions of its own input block to a padded box of the output,
//    and the parts outside its own output block go to their owners and are
//    added there (the reverse halo exchange of Conv3d's backward);
//  - backward-data = that conv's forward on dy, halo gathered as usual;
//  - the weight gradient = that conv's weight gradient with x as "dy" and
//    the padded dy as "input": partial sums over the own block.
// The output distribution doubles every block bound (s * b), so that the
// adjoint conv maps it back onto the input's blocks exactly. Kernel 2
// stride 2 needs no halo at all.
// --deterministic: the forward computes the own output block from a halo of
// x (the adjoint's own-block input gradient), and the weight and bias
// gradients are summed exactly on fixed tiles (layers/deterministic.hpp).
#pragma once
#include "hybrid3d/layers/deterministic.hpp"
#include "hybrid3d/layers/window_layer.hpp"

namespace h3d {

struct ConvTranspose3dOptions {
  int64_t in_channels = 1, out_channels = 1;
  int kernel = 2, stride = 2, padding = 0, output_padding = 0;
  bool bias = true;
};

class ConvTranspose3d : public Layer {
 public:
  ConvTranspose3d(std::string name, ConvTranspose3dOptions o, uint64_t seed);
  ActShape setup(const ActShape& in, const ProcessGrid& grid) override;
  void forward(StepContext& ctx, const Tensor& x, Tensor& y) override;
  void backward(StepContext& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
  bool backward_reads_input() const override { return true; }
  bool backward_reads_output() const override { return false; }
  std::vector<Param*> params() override;
  const ConvTranspose3dOptions& options() const { return o_; }
  int64_t upsampling() const override { return o_.stride; }

 private:
  // The adjoint convolution (output space -> input space) on the padded output box.
  ConvDesc adjoint(int64_t n) const;
  ConvTranspose3dOptions o_;
  Param weight_, bias_;
  PaddedInput output_;  // halo plan of the output space under the adjoint conv
  bool deterministic_ = false;
  OwnInputGrad own_output_;                // --deterministic: the forward
  std::vector<Box> in_tiles_, out_tiles_;  // --deterministic: this rank's tiles
  ExactSum weight_sum_;
  std::array<int64_t, 3> in_ext_{}, out_ext_{};
};

}  // namespace h3d
