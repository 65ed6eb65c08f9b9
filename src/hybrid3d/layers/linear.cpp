#include "hybrid3d/layers/linear.hpp"

#include <cmath>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/layers/deterministic.hpp"
#include "hybrid3d/layers/param_part.hpp"

namespace h3d {

Linear::Linear(std::string name, int64_t in_features, int64_t out_features, uint64_t seed)
    : Layer(std::move(name)), in_(in_features), out_(out_features) {
  weight_ = {name_ + ".weight", Tensor({out_, in_}), Tensor({out_, in_}), GradReduce::kGroupReplicated, nullptr};
  bias_ = {name_ + ".bias", Tensor({out_}), Tensor({out_}), GradReduce::kGroupReplicated, nullptr};
  init_uniform_fan_in(weight_.value, in_, seed, weight_.name);
  init_uniform_fan_in(bias_.value, in_, seed, bias_.name);
}

ActShape Linear::setup(const ActShape& in, const ProcessGrid& grid) {
  spatial_ = in.spatial;
  int64_t features = in.spatial ? in.channels * in.dist.global_volume() : in.features;
  H3D_USAGE_CHECK(features == in_, "layer " << name_ << " expects " << in_ << " input features, but its input has "
                                            << features << " (check --input-size against the model)");
  if (spatial_) {
    Box b = in.dist.box(grid.spatial_rank());
    auto e = in.dist.extent();
    columns_.clear();
    for (int64_t c = 0; c < in.channels; ++c)
      for (int64_t z = b.r[0].lo; z < b.r[0].hi; ++z)
        for (int64_t y = b.r[1].lo; y < b.r[1].hi; ++y)
          for (int64_t x = b.r[2].lo; x < b.r[2].hi; ++x) columns_.push_back(((c * e[0] + z) * e[1] + y) * e[2] + x);
    hold_own_columns();
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

void Linear::hold_own_columns() {
  // One rank's block is the whole volume, flattened in PyTorch's order: its
  // columns are W's own, in order, and W stays whole.
  weight_.reduce = GradReduce::kReplicaSum;
  if (int64_t(columns_.size()) == in_) return;
  H3D_CHECK(!weight_.part, "layer " << name_ << " is set up twice");
  auto part = std::make_shared<ParamPart>();
  part->rows = out_;
  part->cols = in_;
  part->columns = columns_;
  weight_.part = part;
  const int64_t f = int64_t(columns_.size());
  Tensor value(weight_.value.allocator()), grad(weight_.grad.allocator());
  value.reshape_uninit({out_, f});
  grad.resize({out_, f});
  take_part(weight_, weight_.value.data(), value.data());
  weight_.value = std::move(value);
  weight_.grad = std::move(grad);
}

void Linear::forward_deterministic(StepContext& ctx, const Tensor& x, Tensor& y) {
  const int64_t n = x.dim(0), f = x.numel() / std::max<int64_t>(n, 1);
  // Every |partial sum| <= in * max|W| * max|x| (maxima of the global values).
  const double bound = double(in_) * global_max_abs(ctx.grid->world(), weight_.value.data(), weight_.value.numel()) *
                       global_max_abs(ctx.grid->world(), x.data(), x.numel());
  ExactSum acc(n * out_, bound);
  std::vector<float> xp, yp(static_cast<size_t>(out_));
  for (auto& p : pieces_) {
    const int64_t fp = int64_t(p.local.size());
    p.w.reshape_like({out_, fp});
    for (int64_t o = 0; o < out_; ++o)
      for (int64_t j = 0; j < fp; ++j) p.w[o * fp + j] = weight_.value[o * f + p.local[size_t(j)]];
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
  // On a spatial input, this rank's columns of dW: they are complete once
  // summed over the replicas (the group's ranks hold disjoint columns).
  dw.allreduce(replicas);
  dw.values(weight_.grad.data());
}

void Linear::forward(StepContext& ctx, const Tensor& x, Tensor& y) {
  if (deterministic_) return forward_deterministic(ctx, x, y);
  int64_t n = x.dim(0), f = x.numel() / std::max<int64_t>(n, 1);
  y.reshape_like({n, out_});
  ctx.backend->gemm(false, true, n, out_, f, 1.0f, x.data(), f, weight_.value.data(), f, 0.0f, y.data(), out_);
  if (spatial_) ctx.grid->group().allreduce_sum(y.data(), y.numel());
  ctx.backend->add_bias_rows(n, out_, bias_.value.data(), y.data());
}

void Linear::backward(StepContext& ctx, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  if (deterministic_) return backward_deterministic(ctx, x, dy, dx);
  int64_t n = x.dim(0), f = x.numel() / std::max<int64_t>(n, 1);
  dx.reshape_like(x.shape());
  ctx.backend->gemm(false, false, n, f, out_, 1.0f, dy.data(), out_, weight_.value.data(), f, 0.0f, dx.data(), f);
  ctx.backend->column_sums(n, out_, dy.data(), bias_.grad.data());
  ctx.backend->gemm(true, false, out_, f, n, 1.0f, dy.data(), out_, x.data(), f, 0.0f, weight_.grad.data(), f);
}

}  // namespace h3d
