// Residual connections inside a chain of layers (ResNet's blocks), with the
// same link as U-Net's skips (layers/skip.hpp):
//   SkipSource    at the block's entry: passes x on and keeps it;
//   ResidualAdd   at the block's end: y = x + shortcut(kept), where the
//                 shortcut is the identity, or a projection
//                 Conv3d(k1, stride s, no bias) -> BatchNorm3d when the
//                 block changes the width or the grid (torchvision's
//                 `downsample`, named NAME.0 and NAME.1 like its modules).
// Backward: dy goes down the chain unchanged; shortcut'(dy) waits in the
// link until SkipSource adds it to the chain's gradient at the entry. The
// projection's parameters are ResidualAdd's own: their gradients are final
// after its backward, which hands them to the gradient reduction then.
//
// Memory: an identity shortcut frees the kept input in forward; a
// projection keeps its input, the convolution's output for the batch norm
// and nothing else until backward. Both sides must end in the same blocks
// on every rank (the block bounds multiples of the block's stride), so
// nothing here communicates beyond what the projection's layers do.
#pragma once
#include <memory>

#include "hybrid3d/layers/batchnorm3d.hpp"
#include "hybrid3d/layers/conv3d.hpp"
#include "hybrid3d/layers/skip.hpp"

namespace h3d {

struct Projection {
  int64_t in_channels = 0, out_channels = 0;
  int stride = 1;
};

class ResidualAdd : public Layer {
 public:
  // Identity shortcut.
  ResidualAdd(std::string name, std::shared_ptr<SkipLink> link);
  // Projection shortcut; its layers are `projection_name`.0 and .1.
  ResidualAdd(std::string name, std::shared_ptr<SkipLink> link, const std::string& projection_name, Projection p,
              uint64_t seed);
  ActShape setup(const ActShape& in, const ProcessGrid& grid) override;
  void forward(StepContext& ctx, const Tensor& x, Tensor& y) override;
  void forward_consuming(StepContext& ctx, Tensor& x, Tensor& y) override;
  void backward(StepContext& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
  // dy passes down the chain in its own buffer (the shortcut gets a copy).
  void backward_consuming(StepContext& ctx, const Tensor& x, const Tensor& y, Tensor& dy, Tensor& dx) override;
  bool backward_reads_input() const override { return false; }
  bool backward_reads_output() const override { return false; }
  bool in_place() const override { return true; }
  void release_saved() override;
  std::vector<Param*> params() override;
  std::vector<StateBuffer*> buffers() override;

 private:
  // y (holding x) += shortcut(kept).
  void add_shortcut(StepContext& ctx, Tensor& y);
  std::shared_ptr<SkipLink> link_;
  std::unique_ptr<Conv3d> conv_;  // null: identity
  std::unique_ptr<BatchNorm3d> bn_;
  Tensor conv_out_, bn_out_;  // the projection's activations, for its backward
};

}  // namespace h3d
