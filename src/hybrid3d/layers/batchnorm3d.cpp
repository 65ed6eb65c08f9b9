#include "hybrid3d/layers/batchnorm3d.hpp"

#include <cmath>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/layers/deterministic.hpp"

namespace h3d {

BatchNorm3d::BatchNorm3d(std::string name, int64_t channels, double momentum, double eps)
    : Layer(std::move(name)), c_(channels), momentum_(momentum), eps_(eps) {
  gamma_ = {name_ + ".weight", Tensor({c_}, 1.0f), Tensor({c_}), GradReduce::kComplete, nullptr};
  beta_ = {name_ + ".bias", Tensor({c_}, 0.0f), Tensor({c_}), GradReduce::kComplete, nullptr};
  running_mean_ = {name_ + ".running_mean", Tensor({c_}, 0.0f), false};
  running_var_ = {name_ + ".running_var", Tensor({c_}, 1.0f), false};
  batches_ = {name_ + ".num_batches_tracked", Tensor({1}, 0.0f), true};
}

ActShape BatchNorm3d::setup(const ActShape& in, const ProcessGrid& grid) {
  H3D_USAGE_CHECK(in.spatial && in.channels == c_,
                  "layer " << name_ << " expects " << c_ << " spatial channels, got " << in.channels);
  global_volume_ = in.dist.global_volume();
  deterministic_ = in.deterministic;
  ext_ = in.dist.box(grid.spatial_rank()).extents();
  if (deterministic_) tiles_ = local_tiles(in, grid.spatial_rank());
  return in;
}

void BatchNorm3d::global_sums(StepContext& ctx, const Tensor& x, const Tensor* dy, std::vector<double>& s) const {
  const int64_t n = x.dim(0), v = x.numel() / std::max<int64_t>(1, n * c_);
  const Comm& world = ctx.grid->world();
  s.assign(size_t(2 * c_ + 1), 0.0);
  const double samples = ctx.grid->is_group_root() ? double(n) : 0.0;
  if (!deterministic_) {
    // [sum(c), second sum(c), local sample count]: one allreduce over the world.
    if (dy)
      ctx.backend->channel_grad_moments(x.data(), dy->data(), n, c_, v, mean_.data(), s.data(), s.data() + c_);
    else
      ctx.backend->channel_moments(x.data(), n, c_, v, s.data(), s.data() + c_);
    s[size_t(2 * c_)] = samples;
    world.allreduce_sum(s.data(), int64_t(s.size()));
    return;
  }
  // Bounds of the exact sums from global maxima: |x - mean| <= max|x| + max|mean|.
  const double count = double(world.allreduce_sum(int64_t(n * v)));
  const double mx = global_max_abs(world, x.data(), x.numel());
  const float* xs = x.data();
  ExactSum first, second;
  if (dy) {
    double mm = 0;
    for (float m : mean_) mm = std::max(mm, double(std::fabs(m)));
    const double mdy = global_max_abs(world, dy->data(), dy->numel());
    first.reset(c_, count * mdy);
    second.reset(c_, count * mdy * (mx + mm));
    const float* g = dy->data();
    add_tile_sums(n, c_, ext_, tiles_, first, [&](int64_t, int64_t i) { return double(g[i]); });
    add_tile_sums(n, c_, ext_, tiles_, second,
                  [&](int64_t c, int64_t i) { return double(g[i]) * (double(xs[i]) - mean_[size_t(c)]); });
  } else {
    first.reset(c_, count * mx);
    second.reset(c_, count * mx * mx);
    add_tile_sums(n, c_, ext_, tiles_, first, [&](int64_t, int64_t i) { return double(xs[i]); });
    add_tile_sums(n, c_, ext_, tiles_, second, [&](int64_t, int64_t i) { return double(xs[i]) * xs[i]; });
  }
  first.allreduce(world);
  second.allreduce(world);
  for (int64_t c = 0; c < c_; ++c) {
    s[size_t(c)] = first.value(c);
    s[size_t(c_ + c)] = second.value(c);
  }
  s[size_t(2 * c_)] = double(world.allreduce_sum(int64_t(samples)));
}

void BatchNorm3d::forward(StepContext& ctx, const Tensor& x, Tensor& y) {
  int64_t n = x.dim(0), v = x.numel() / std::max<int64_t>(1, n * c_);
  std::vector<float> scale(static_cast<size_t>(c_)), shift(static_cast<size_t>(c_));
  y.reshape_like(x.shape());
  if (ctx.training) {
    std::vector<double> s;
    global_sums(ctx, x, nullptr, s);
    double m = s[size_t(2 * c_)] * double(global_volume_);
    // (A simulated world, the memory planner's, sums nothing: no count.)
    H3D_CHECK(m > 1 || ctx.grid->world().is_simulated(),
              "layer " << name_ << ": batch statistics need more than one value per channel");
    mean_.assign(size_t(c_), 0.0f);
    invstd_.assign(size_t(c_), 0.0f);
    for (int64_t c = 0; c < c_; ++c) {
      double mean = s[size_t(c)] / m, var = std::max(0.0, s[size_t(c_ + c)] / m - mean * mean);
      mean_[size_t(c)] = float(mean);
      invstd_[size_t(c)] = float(1.0 / std::sqrt(var + eps_));
      running_mean_.value[c] = float((1 - momentum_) * running_mean_.value[c] + momentum_ * mean);
      running_var_.value[c] = float((1 - momentum_) * running_var_.value[c] + momentum_ * var * m / (m - 1));
    }
    batches_.value[0] += 1.0f;
    for (int64_t c = 0; c < c_; ++c) {
      scale[size_t(c)] = gamma_.value[c] * invstd_[size_t(c)];
      shift[size_t(c)] = beta_.value[c] - mean_[size_t(c)] * scale[size_t(c)];
    }
  } else {
    for (int64_t c = 0; c < c_; ++c) {
      float is = float(1.0 / std::sqrt(double(running_var_.value[c]) + eps_));
      scale[size_t(c)] = gamma_.value[c] * is;
      shift[size_t(c)] = beta_.value[c] - running_mean_.value[c] * scale[size_t(c)];
    }
  }
  ctx.backend->channel_affine(x.data(), n, c_, v, scale.data(), shift.data(), y.data());
}

void BatchNorm3d::backward(StepContext& ctx, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  H3D_CHECK(!mean_.empty(), "layer " << name_ << ": backward without a training forward");
  int64_t n = x.dim(0), v = x.numel() / std::max<int64_t>(1, n * c_);
  std::vector<double> s;
  global_sums(ctx, x, &dy, s);
  double m = s[size_t(2 * c_)] * double(global_volume_);
  const size_t nc = static_cast<size_t>(c_);
  std::vector<float> a(nc), b(nc), e(nc);
  for (int64_t c = 0; c < c_; ++c) {
    double is = invstd_[size_t(c)], g = gamma_.value[c];
    double sum_dy = s[size_t(c)], sum_dy_xc = s[size_t(c_ + c)];
    beta_.grad[c] = float(sum_dy);
    gamma_.grad[c] = float(sum_dy_xc * is);
    double ac = g * is, bc = -g * is * is * is * sum_dy_xc / m;
    a[size_t(c)] = float(ac);
    b[size_t(c)] = float(bc);
    e[size_t(c)] = float(-ac * sum_dy / m);
  }
  dx.reshape_like(x.shape());
  ctx.backend->channel_grad_apply(x.data(), dy.data(), n, c_, v, mean_.data(), a.data(), b.data(), e.data(),
                                  dx.data());
}

}  // namespace h3d
