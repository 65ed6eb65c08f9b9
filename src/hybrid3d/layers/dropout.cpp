#include "hybrid3d/layers/dropout.hpp"

#include <algorithm>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/core/rng.hpp"

namespace h3d {

Dropout::Dropout(std::string name, float p) : Layer(std::move(name)), p_(p) {
  H3D_USAGE_CHECK(p >= 0.0f && p < 1.0f, "--dropout " << p << " must be in [0, 1)");
  stream_ = fnv1a(name_);
}

ActShape Dropout::setup(const ActShape& in, const ProcessGrid& grid) {
  shape_ = in;
  if (in.spatial) box_ = in.dist.box(grid.spatial_rank());
  return in;
}

void Dropout::apply(const StepContext& ctx, const Tensor& in, Tensor& out) const {
  if (&in != &out) {
    out.set_allocator(in.allocator());
    out.reshape_uninit(in.shape());
  }
  const int64_t n = in.dim(0);
  DropoutDesc d;
  d.p = p_;
  d.seed = ctx.seed;
  d.stream = stream_ ^ (uint64_t(ctx.step) * 0x9E3779B97F4A7C15ull);
  d.per_sample = in.numel() / std::max<int64_t>(n, 1);
  // Each sample's counters start at its global position times its global size.
  const int64_t global_per_sample = shape_.spatial ? shape_.channels * shape_.dist.global_volume() : shape_.features;
  for (int64_t s = 0; s < n; ++s)
    d.sample_counter.push_back(uint64_t(ctx.batch_positions.at(size_t(s))) * uint64_t(global_per_sample));
  d.spatial = shape_.spatial;
  d.box = box_;
  d.global = shape_.dist.extent();
  ctx.backend->dropout(d, in.data(), out.data());
}

void Dropout::forward(StepContext& ctx, const Tensor& x, Tensor& y) {
  if (!ctx.training || p_ == 0.0f) {
    y = x;
    return;
  }
  apply(ctx, x, y);
}

void Dropout::backward(StepContext& ctx, const Tensor&, const Tensor&, const Tensor& dy, Tensor& dx) {
  if (!ctx.training || p_ == 0.0f) {
    dx = dy;
    return;
  }
  apply(ctx, dy, dx);  // the same mask and scale
}

void Dropout::forward_consuming(StepContext& ctx, Tensor& x, Tensor& y) {
  y = std::move(x);
  if (ctx.training && p_ != 0.0f) apply(ctx, y, y);
}

void Dropout::backward_consuming(StepContext& ctx, const Tensor&, const Tensor&, Tensor& dy, Tensor& dx) {
  dx = std::move(dy);
  if (ctx.training && p_ != 0.0f) apply(ctx, dx, dx);
}

}  // namespace h3d
