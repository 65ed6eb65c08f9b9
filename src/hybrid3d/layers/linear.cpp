#include "hybrid3d/layers/linear.hpp"

#include <cmath>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/layers/deterministic.hpp"

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
  deterministic_ = in.deterministic;
  pieces_.clear();
  if (deterministic_) {
    weight_.reduce = bias_.reduce = GradReduce::kComplete;
    if (!spatial_) {
      pieces_.emplace_back();
      for (int64_t j = 0; j < in_; ++j) pieces_.back().local.push_back(j);
    } else {
      const auto e = in.dist.box(grid.spatial_rank()).extents();
      for (const Box& t : local_tiles(in, grid.spatial_rank())) {
        pieces_.emplace_back();
        for (int64_t c = 0; c < in.channels; ++c)
          for (int64_t z = t.r[0].lo; z < t.r[0].hi; ++z)
            for (int64_t y = t.r[1].lo; y < t.r[1].hi; ++y)
              for (int64_t x = t.r[2].lo; x < t.r[2].hi; ++x)
                pieces_.back().local.push_back(((c * e[0] + z) * e[1] + y) * e[2] + x);
      }
    }
  }
  ActShape out;
  out.spatial = false;
  out.features = out_;
  out.deterministic = in.deterministic;
  return out;
}

namespace {
double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, double(std::fabs(t[i])));
  return m;
}
}  // namespace

void Linear::forward_deterministic(StepContext& ctx, const Tensor& x, Tensor& y) {
  const int64_t n = x.dim(0), f = x.numel() / std::max<int64_t>(n, 1);
  // Every |partial sum| <= in * max|W| * max|x| (maxima of the global values).
  const double bound = double(in_) * max_abs(weight_.value) * global_max_abs(ctx.grid->world(), x.data(), x.numel());
  ExactSum acc(n * out_, bound);
  std::vector<float> xp, yp(static_cast<size_t>(out_));
  for (auto& p : pieces_) {
    const int64_t fp = int64_t(p.local.size());
    p.w.reshape_like({out_, fp});
    for (int64_t o = 0; o < out_; ++o)
      for (int64_t j = 0; j < fp; ++j)
        p.w[o * fp + j] = weight_.value[o * in_ + (spatial_ ? columns_[size_t(p.local[size_t(j)])] : p.local[size_t(j)])];
    xp.resize(size_t(fp));
    for (int64_t s = 0; s < n; ++s) {
      for (int64_t j = 0; j < fp; ++j) xp[size_t(j)] = x[s * f + p.local[size_t(j)]];
      ctx.backend->gemm(false, true, 1, out_, fp, 1.0f, xp.data(), fp, p.w.data(), fp, 0.0f, yp.data(), out_);
      for (int64_t o = 0; o < out_; ++o) acc.add(s * out_ + o, yp[size_t(o)]);
    }
  }
  if (spatial_) acc.allreduce(ctx.grid->group());
  y.reshape_like({n, out_});
  acc.values(y.data());
  ctx.backend->add_bias_rows(n, out_, bias_.value.data(), y.data());
}

void Linear::backward_deterministic(StepContext& ctx, const Tensor& x, const Tensor& dy, Tensor& dx) {
  const int64_t n = x.dim(0), f = x.numel() / std::max<int64_t>(n, 1);
  const Comm &world = ctx.grid->world(), &replicas = ctx.grid->replicas();
  dx.reshape_like(x.shape());
  std::vector<float> dxp;
  for (auto& p : pieces_) {
    const int64_t fp = int64_t(p.local.size());
    dxp.resize(size_t(fp));
    for (int64_t s = 0; s < n; ++s) {
      ctx.backend->gemm(false, false, 1, fp, out_, 1.0f, dy.data() + s * out_, out_, p.w.data(), fp, 0.0f,
                        dxp.data(), fp);
      for (int64_t j = 0; j < fp; ++j) dx[s * f + p.local[size_t(j)]] = dxp[size_t(j)];
    }
  }
  // dW and db: one exact product per sample and element, summed over the
  // data groups (every rank of a group holds the same samples).
  const double samples = double(replicas.allreduce_sum(n));
  const double mdy = global_max_abs(world, dy.data(), dy.numel());
  const double mx = global_max_abs(world, x.data(), x.numel());
  ExactSum& dw = dw_sum_;
  dw.reset(out_ * f, samples * mdy * mx);
  ExactSum db(out_, samples * mdy);
  std::vector<double> products(static_cast<size_t>(out_ * f));  // exact: float x float
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t o = 0; o < out_; ++o) {
      const double g = dy[s * out_ + o];
      db.add(o, g);
      for (int64_t j = 0; j < f; ++j) products[size_t(o * f + j)] = g * double(x[s * f + j]);
    }
    dw.add_all(products.data());
  }
  db.allreduce(replicas);
  db.values(bias_.grad.data());
  dw.allreduce(replicas);
  if (!spatial_) {
    dw.values(weight_.grad.data());
    return;
  }
  // The group's ranks hold disjoint columns: a float sum of them is exact.
  weight_.grad.fill(0.0f);
  for (int64_t o = 0; o < out_; ++o)
    for (int64_t j = 0; j < f; ++j) weight_.grad[o * in_ + columns_[size_t(j)]] = float(dw.value(o * f + j));
  ctx.grid->group().allreduce_sum(weight_.grad.data(), weight_.grad.numel());
}

const float* Linear::local_weight(Backend& backend) {
  if (!spatial_) return weight_.value.data();
  int64_t f = int64_t(columns_.size());
  w_local_.set_allocator(backend.allocator());
  w_local_.reshape_like({out_, f});
  backend.gather_columns(out_, in_, weight_.value.data(), columns_.data(), f, w_local_.data());
  return w_local_.data();
}

void Linear::forward(StepContext& ctx, const Tensor& x, Tensor& y) {
  if (deterministic_) return forward_deterministic(ctx, x, y);
  int64_t n = x.dim(0), f = x.numel() / std::max<int64_t>(n, 1);
  y.reshape_like({n, out_});
  ctx.backend->gemm(false, true, n, out_, f, 1.0f, x.data(), f, local_weight(*ctx.backend), f, 0.0f, y.data(),
                    out_);
  if (spatial_) ctx.grid->group().allreduce_sum(y.data(), y.numel());
  ctx.backend->add_bias_rows(n, out_, bias_.value.data(), y.data());
}

void Linear::backward(StepContext& ctx, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  if (deterministic_) return backward_deterministic(ctx, x, dy, dx);
  int64_t n = x.dim(0), f = x.numel() / std::max<int64_t>(n, 1);
  const float* w = spatial_ ? w_local_.data() : weight_.value.data();
  dx.reshape_like(x.shape());
  ctx.backend->gemm(false, false, n, f, out_, 1.0f, dy.data(), out_, w, f, 0.0f, dx.data(), f);
  ctx.backend->column_sums(n, out_, dy.data(), bias_.grad.data());
  if (!spatial_) {
    ctx.backend->gemm(true, false, out_, f, n, 1.0f, dy.data(), out_, x.data(), f, 0.0f, weight_.grad.data(), f);
    return;
  }
  dw_local_.set_allocator(ctx.backend->allocator());
  dw_local_.reshape_like({out_, f});
  ctx.backend->gemm(true, false, out_, f, n, 1.0f, dy.data(), out_, x.data(), f, 0.0f, dw_local_.data(), f);
  ctx.backend->fill(weight_.grad.data(), weight_.grad.numel(), 0.0f);
  ctx.backend->scatter_columns(out_, f, dw_local_.data(), columns_.data(), in_, weight_.grad.data());
}

}  // namespace h3d
