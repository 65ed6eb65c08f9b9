#include "hybrid3d/layers/residual.hpp"

#include "hybrid3d/core/error.hpp"

namespace h3d {

ResidualAdd::ResidualAdd(std::string name, std::shared_ptr<SkipLink> link)
    : Layer(std::move(name)), link_(std::move(link)) {}

ResidualAdd::ResidualAdd(std::string name, std::shared_ptr<SkipLink> link, const std::string& projection_name,
                         Projection p, uint64_t seed)
    : Layer(std::move(name)), link_(std::move(link)) {
  conv_ = std::make_unique<Conv3d>(projection_name + ".0",
                                   Conv3dOptions{p.in_channels, p.out_channels, 1, p.stride, Padding::kHalf, false}, seed);
  bn_ = std::make_unique<BatchNorm3d>(projection_name + ".1", p.out_channels);
}

ActShape ResidualAdd::setup(const ActShape& in, const ProcessGrid& grid) {
  H3D_CHECK(link_->set_up, "layer " << name_ << ": its skip source comes later in the chain");
  ActShape shortcut = link_->shape;
  if (conv_) {
    shortcut = conv_->setup(shortcut, grid);
    shortcut = bn_->setup(shortcut, grid);
    // The block's first layer reads the entry's input: its gradient is needed.
    conv_->set_input_grad_needed(true);
  }
  H3D_USAGE_CHECK(in.spatial && shortcut.channels == in.channels && in.dist == shortcut.dist,
                  "layer " << name_ << ": the block's output (" << in.channels << " channels, block "
                           << in.dist.box(grid.spatial_rank()) << ") and its shortcut (" << shortcut.channels
                           << " channels, block " << shortcut.dist.box(grid.spatial_rank()) << ") differ on spatial rank "
                           << grid.spatial_rank() << (conv_ ? "" : "; a block that changes them needs a projection")
                           << "; block bounds must be multiples of the block's stride");
  return in;
}

void ResidualAdd::add_shortcut(StepContext& ctx, Tensor& y) {
  const Tensor* s = &link_->kept;
  if (conv_) {
    conv_out_.set_allocator(ctx.backend->allocator());
    bn_out_.set_allocator(ctx.backend->allocator());
    conv_->forward(ctx, link_->kept, conv_out_);
    bn_->forward(ctx, conv_out_, bn_out_);
    s = &bn_out_;
  }
  H3D_CHECK(s->shape() == y.shape(), "layer " << name_ << ": the shortcut activation is missing");
  ctx.backend->axpy(y.numel(), 1.0f, s->data(), y.data());
  bn_out_.release();  // the batch norm's backward reads its input only
  if (!conv_ || !ctx.training) release_saved();
}

void ResidualAdd::forward(StepContext& ctx, const Tensor& x, Tensor& y) {
  y = x;
  add_shortcut(ctx, y);
}

void ResidualAdd::forward_consuming(StepContext& ctx, Tensor& x, Tensor& y) {
  y = std::move(x);
  add_shortcut(ctx, y);
}

void ResidualAdd::backward(StepContext& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
  Tensor g = dy;
  backward_consuming(ctx, x, y, g, dx);
}

void ResidualAdd::backward_consuming(StepContext& ctx, const Tensor&, const Tensor&, Tensor& dy, Tensor& dx) {
  if (conv_) {
    Tensor d_conv(ctx.backend->allocator());
    bn_->backward(ctx, conv_out_, Tensor(), dy, d_conv);
    conv_->backward(ctx, link_->kept, conv_out_, d_conv, link_->grad);
    release_saved();
  } else {
    link_->grad = dy;
  }
  dx = std::move(dy);
}

void ResidualAdd::release_saved() {
  link_->kept.release();
  conv_out_.release();
  bn_out_.release();
  if (conv_) conv_->release_saved(), bn_->release_saved();
}

std::vector<Param*> ResidualAdd::params() {
  if (!conv_) return {};
  std::vector<Param*> out = conv_->params();
  for (auto* p : bn_->params()) out.push_back(p);
  return out;
}

std::vector<StateBuffer*> ResidualAdd::buffers() { return conv_ ? bn_->buffers() : std::vector<StateBuffer*>{}; }

}  // namespace h3d
