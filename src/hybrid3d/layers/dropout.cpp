#include "hybrid3d/layers/dropout.hpp"

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
  if (&in != &out) out.reshape_uninit(in.shape());
  const float keep_scale = 1.0f / (1.0f - p_);
  const int64_t n = in.dim(0);
  const uint64_t stream = stream_ ^ (uint64_t(ctx.step) * 0x9E3779B97F4A7C15ull);
  int64_t per_sample = in.numel() / std::max<int64_t>(n, 1);
  // Global element count per sample, and a map from local to global index.
  int64_t global_per_sample = shape_.spatial ? shape_.channels * shape_.dist.global_volume() : shape_.features;
  auto e = shape_.dist.extent();
  auto b = box_.extents();
  for (int64_t s = 0; s < n; ++s) {
    uint64_t base = uint64_t(ctx.batch_positions.at(size_t(s))) * uint64_t(global_per_sample);
    for (int64_t i = 0; i < per_sample; ++i) {
      int64_t g = i;
      if (shape_.spatial) {
        int64_t x = i % b[2], y = (i / b[2]) % b[1], z = (i / (b[2] * b[1])) % b[0], c = i / (b[0] * b[1] * b[2]);
        g = ((c * e[0] + z + box_.r[0].lo) * e[1] + y + box_.r[1].lo) * e[2] + x + box_.r[2].lo;
      }
      bool keep = uniform01(ctx.seed, stream, base + uint64_t(g)) >= double(p_);
      int64_t k = s * per_sample + i;
      out[k] = keep ? in[k] * keep_scale : 0.0f;
    }
  }
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
