#include "hybrid3d/layers/skip.hpp"

#include <cstring>

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

void SkipSource::backward_consuming(StepContext&, const Tensor&, const Tensor&, Tensor& dy, Tensor& dx) {
  // The skip's gradient joins the chain's: dx = dy + grad, in dy's buffer.
  H3D_CHECK(link_->grad.shape() == dy.shape(), "layer " << name_ << ": no gradient from its concatenation");
  float* d = dy.data();
  const float* g = link_->grad.data();
  const int64_t n = dy.numel();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) d[i] += g[i];
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

void SkipConcat::forward(StepContext&, const Tensor& x, Tensor& y) {
  const Tensor& k = link_->kept;
  const int64_t n = x.dim(0);
  H3D_CHECK(k.numel() == n * c_skip_ * volume_, "layer " << name_ << ": the skip activation is missing");
  std::vector<int64_t> shape = x.shape();
  shape[1] = c_in_ + c_skip_;
  y.reshape_uninit(shape);
  const size_t a = size_t(c_in_ * volume_), b = size_t(c_skip_ * volume_);
  for (int64_t s = 0; s < n; ++s) {
    std::memcpy(y.data() + size_t(s) * (a + b), x.data() + size_t(s) * a, a * sizeof(float));
    std::memcpy(y.data() + size_t(s) * (a + b) + a, k.data() + size_t(s) * b, b * sizeof(float));
  }
  link_->kept.release();  // backward only splits dy
}

void SkipConcat::backward(StepContext&, const Tensor&, const Tensor&, const Tensor& dy, Tensor& dx) {
  const int64_t n = dy.dim(0);
  std::vector<int64_t> shape = dy.shape();
  shape[1] = c_in_;
  dx.reshape_uninit(shape);
  shape[1] = c_skip_;
  link_->grad.reshape_uninit(shape);
  const size_t a = size_t(c_in_ * volume_), b = size_t(c_skip_ * volume_);
  for (int64_t s = 0; s < n; ++s) {
    std::memcpy(dx.data() + size_t(s) * a, dy.data() + size_t(s) * (a + b), a * sizeof(float));
    std::memcpy(link_->grad.data() + size_t(s) * b, dy.data() + size_t(s) * (a + b) + a, b * sizeof(float));
  }
}

}  // namespace h3d
