#include "hybrid3d/layers/linear.hpp"

#include "hybrid3d/core/error.hpp"

namespace h3d {

Linear::Linear(std::string name, int64_t in_features, int64_t out_features, uint64_t seed)
    : Layer(std::move(name)), in_(in_features), out_(out_features) {
  weight_ = {name_ + ".weight", Tensor({out_, in_}), Tensor({out_, in_}), GradReduce::kGroupReplicated};
  bias_ = {name_ + ".bias", Tensor({out_}), Tensor({out_}), GradReduce::kGroupReplicated};
  init_uniform_fan_in(weight_.value, in_, seed, weight_.name);
  init_uniform_fan_in(bias_.value, in_, seed, bias_.name);
}

ActShape Linear::setup(const ActShape& in, const ProcessGrid& grid) {
  spatial_ = in.spatial;
  int64_t features = in.spatial ? in.channels * in.dist.global_volume() : in.features;
  H3D_USAGE_CHECK(features == in_, "layer " << name_ << " expects " << in_ << " input features, but its input has "
                                            << features << " (check --input-size against the model)");
  if (spatial_) {
    weight_.reduce = GradReduce::kPartialSum;
    Box b = in.dist.box(grid.spatial_rank());
    auto e = in.dist.extent();
    columns_.clear();
    for (int64_t c = 0; c < in.channels; ++c)
      for (int64_t z = b.r[0].lo; z < b.r[0].hi; ++z)
        for (int64_t y = b.r[1].lo; y < b.r[1].hi; ++y)
          for (int64_t x = b.r[2].lo; x < b.r[2].hi; ++x) columns_.push_back(((c * e[0] + z) * e[1] + y) * e[2] + x);
  }
  ActShape out;
  out.spatial = false;
  out.features = out_;
  return out;
}

const float* Linear::local_weight() {
  if (!spatial_) return weight_.value.data();
  int64_t f = int64_t(columns_.size());
  w_local_.reshape_like({out_, f});
  for (int64_t o = 0; o < out_; ++o)
    for (int64_t j = 0; j < f; ++j) w_local_[o * f + j] = weight_.value[o * in_ + columns_[size_t(j)]];
  return w_local_.data();
}

void Linear::forward(StepContext& ctx, const Tensor& x, Tensor& y) {
  int64_t n = x.dim(0), f = x.numel() / std::max<int64_t>(n, 1);
  y.reshape_like({n, out_});
  ctx.backend->gemm(false, true, n, out_, f, 1.0f, x.data(), f, local_weight(), f, 0.0f, y.data(), out_);
  if (spatial_) ctx.grid->group().allreduce_sum(y.data(), y.numel());
  for (int64_t s = 0; s < n; ++s)
    for (int64_t o = 0; o < out_; ++o) y[s * out_ + o] += bias_.value[o];
}

void Linear::backward(StepContext& ctx, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  int64_t n = x.dim(0), f = x.numel() / std::max<int64_t>(n, 1);
  const float* w = spatial_ ? w_local_.data() : weight_.value.data();
  dx.reshape_like(x.shape());
  ctx.backend->gemm(false, false, n, f, out_, 1.0f, dy.data(), out_, w, f, 0.0f, dx.data(), f);
  for (int64_t o = 0; o < out_; ++o) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += dy[i * out_ + o];
    bias_.grad[o] = float(s);
  }
  if (!spatial_) {
    ctx.backend->gemm(true, false, out_, f, n, 1.0f, dy.data(), out_, x.data(), f, 0.0f, weight_.grad.data(), f);
    return;
  }
  dw_local_.reshape_like({out_, f});
  ctx.backend->gemm(true, false, out_, f, n, 1.0f, dy.data(), out_, x.data(), f, 0.0f, dw_local_.data(), f);
  weight_.grad.fill(0.0f);
  for (int64_t o = 0; o < out_; ++o)
    for (int64_t j = 0; j < f; ++j) weight_.grad[o * in_ + columns_[size_t(j)]] = dw_local_[o * f + j];
}

}  // namespace h3d
