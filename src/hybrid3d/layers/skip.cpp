#include "hybrid3d/layers/skip.hpp"

#include "hybrid3d/core/error.hpp"

namespace h3d {

ActShape SkipSource::setup(const ActShape& in, const ProcessGrid&) {
  H3D_USAGE_CHECK(in.spatial, "layer " << name_ << ": a skip connection needs a spatial activation");
  link_->shape = in;
  link_->set_up = true;
  return in;
}

void SkipSource::forward(StepContext&, const Tensor& x, Tensor& y) {
  link_->kept = x;
  y = x;
}

void SkipSource::forward_consuming(StepContext&, Tensor& x, Tensor& y) {
  link_->kept = x;
  y = std::move(x);
}

void SkipSource::backward(StepContext& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
  Tensor g = dy;
  backward_consuming(ctx, x, y, g, dx);
}

void SkipSource::backward_consuming(StepContext& ctx, const Tensor&, const Tensor&, Tensor& dy, Tensor& dx) {
  // The skip's gradient joins the chain's: dx = dy + grad, in dy's buffer.
  H3D_CHECK(link_->grad.shape() == dy.shape(), "layer " << name_ << ": no gradient from its concatenation");
  ctx.backend->axpy(dy.numel(), 1.0f, link_->grad.data(), dy.data());
  link_->grad.release();
  dx = std::move(dy);
}

ActShape SkipConcat::setup(const ActShape& in, const ProcessGrid& grid) {
  H3D_CHECK(link_->set_up, "layer " << name_ << ": its skip source comes later in the chain");
  H3D_USAGE_CHECK(in.spatial && in.dist == link_->shape.dist,
                  "layer " << name_ << ": the decoder activation and the skip connection have different blocks ("
                           << in.dist.box(grid.spatial_rank()) << " and " << link_->shape.dist.box(grid.spatial_rank())
                           << " on spatial rank " << grid.spatial_rank()
                           << "); the block bounds must be multiples of 2 per pooling level in between");
  c_in_ = in.channels;
  c_skip_ = link_->shape.channels;
  volume_ = in.dist.box(grid.spatial_rank()).volume();
  ActShape out = in;
  out.channels = c_in_ + c_skip_;
  return out;
}

void SkipConcat::forward(StepContext& ctx, const Tensor& x, Tensor& y) {
  const Tensor& k = link_->kept;
  const int64_t n = x.dim(0);
  H3D_CHECK(k.numel() == n * c_skip_ * volume_, "layer " << name_ << ": the skip activation is missing");
  std::vector<int64_t> shape = x.shape();
  shape[1] = c_in_ + c_skip_;
  y.set_allocator(x.allocator());
  y.reshape_uninit(shape);
  ctx.backend->concat_samples(n, c_in_ * volume_, x.data(), c_skip_ * volume_, k.data(), y.data());
  link_->kept.release();  // backward only splits dy
}

void SkipConcat::backward(StepContext& ctx, const Tensor&, const Tensor&, const Tensor& dy, Tensor& dx) {
  const int64_t n = dy.dim(0);
  std::vector<int64_t> shape = dy.shape();
  shape[1] = c_in_;
  dx.set_allocator(dy.allocator());
  dx.reshape_uninit(shape);
  shape[1] = c_skip_;
  link_->grad.set_allocator(dy.allocator());
  link_->grad.reshape_uninit(shape);
  ctx.backend->split_samples(n, c_in_ * volume_, c_skip_ * volume_, dy.data(), dx.data(), link_->grad.data());
}

}  // namespace h3d
