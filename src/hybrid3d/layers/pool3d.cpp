#include "hybrid3d/layers/pool3d.hpp"

#include <limits>

#include "hybrid3d/core/error.hpp"

namespace h3d {

Pool3d::Pool3d(std::string name, PoolKind kind, int kernel, int stride, int padding)
    : Layer(std::move(name)), kind_(kind) {
  H3D_USAGE_CHECK(kernel >= 1 && stride >= 1 && padding >= 0 && 2 * padding <= kernel,
                  "layer " << name_ << ": pooling kernel " << kernel << ", stride " << stride << ", padding " << padding
                           << " is not valid (padding at most half the kernel)");
  w_ = {kernel, stride, padding, padding};
}

ActShape Pool3d::setup(const ActShape& in, const ProcessGrid& grid) {
  H3D_USAGE_CHECK(in.spatial, "layer " << name_ << " needs a spatial input");
  channels_ = in.channels;
  Window3D w{w_, w_, w_};
  ActShape out = in.through(w, name_);
  float pad = kind_ == PoolKind::kMax ? -std::numeric_limits<float>::infinity() : 0.0f;
  input_.plan(in.dist, w, out.dist, grid.spatial_rank(), pad);
  own_block_grad_ = in.deterministic && !input_.trivial();
  if (own_block_grad_) {
    H3D_USAGE_CHECK(kind_ == PoolKind::kAvg, "--deterministic: layer "
                                                 << name_
                                                 << " is a max pooling with a halo (overlapping windows or "
                                                    "padding), which this mode does not support");
    own_grad_.plan(in.dist, w, out.dist, grid.spatial_rank(), name_);
  }
  pass_through_ = false;
  pad_in_kernel_ = kind_ == PoolKind::kAvg && !in.deterministic && input_.padding_only();
  out_ext_ = out.dist.box(grid.spatial_rank()).extents();
  in_ext_ = in.dist.box(grid.spatial_rank()).extents();
  return out;
}

PoolDesc Pool3d::desc(int64_t n) const {
  PoolDesc d;
  d.kind = kind_;
  d.n = n;
  d.c = channels_;
  d.in = input_.padded_extents();
  d.out = out_ext_;
  d.k = {w_.k, w_.k, w_.k};
  d.stride = {w_.s, w_.s, w_.s};
  d.relu_grad_slope = relu_grad_slope_;
  if (pad_in_kernel_) {
    d.in = in_ext_;
    d.pad_lo = input_.padding_lo();
    d.pad_hi = input_.padding_hi();
  }
  return d;
}

void Pool3d::run_forward(StepContext& ctx, const Tensor& xp, Tensor& y) {
  y.reshape_uninit({n_, channels_, out_ext_[0], out_ext_[1], out_ext_[2]});
  ctx.backend->pool3d_forward(desc(n_), xp.data(), y.data());
  if (kind_ == PoolKind::kAvg) input_.release();  // backward needs no values
}

void Pool3d::forward(StepContext& ctx, const Tensor& x, Tensor& y) {
  if (pass_through_) {
    y = x;
    return;
  }
  n_ = x.dim(0);
  run_forward(ctx, pad_in_kernel_ ? x : input_.gather(ctx, x), y);
}

void Pool3d::forward_consuming(StepContext& ctx, Tensor& x, Tensor& y) {
  if (pass_through_) {
    y = std::move(x);
    return;
  }
  n_ = x.dim(0);
  run_forward(ctx, pad_in_kernel_ ? x : input_.gather_consuming(ctx, x), y);
  x.release();
}

void Pool3d::backward(StepContext& ctx, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  if (pass_through_) {
    dx = dy;
    return;
  }
  if (own_block_grad_) {  // average pooling: no values needed
    const Tensor& g = own_grad_.gather(ctx, dy);
    dx.reshape_uninit({n_, channels_, in_ext_[0], in_ext_[1], in_ext_[2]});
    ctx.backend->pool3d_backward(own_grad_.geometry(desc(n_)), nullptr, g.data(), dx.data());
    own_grad_.release();
    return;
  }
  if (pad_in_kernel_) {  // average pooling: no values needed
    dx.reshape_uninit({n_, channels_, in_ext_[0], in_ext_[1], in_ext_[2]});
    ctx.backend->pool3d_backward(desc(n_), nullptr, dy.data(), dx.data());
    return;
  }
  const float* xp = kind_ == PoolKind::kMax ? input_.saved(x).data() : nullptr;
  input_.input_grad(ctx, {n_, channels_, in_ext_[0], in_ext_[1], in_ext_[2]}, dx,
                    [&](float* out) { ctx.backend->pool3d_backward(desc(n_), xp, dy.data(), out); });
}

bool Pool3d::windows_tile_input() const {
  if (kind_ != PoolKind::kMax || !input_.trivial() || own_block_grad_ || w_.k != w_.s || w_.p_lo || w_.p_hi)
    return false;
  for (int i = 0; i < 3; ++i)
    if (out_ext_[size_t(i)] * w_.s != in_ext_[size_t(i)]) return false;
  return true;
}

void Pool3d::backward_consuming(StepContext& ctx, const Tensor& x, const Tensor& y, Tensor& dy, Tensor& dx) {
  if (pass_through_) {
    dx = std::move(dy);
    return;
  }
  Layer::backward_consuming(ctx, x, y, dy, dx);
}

void Pool3d::backward_consuming_input(StepContext& ctx, Tensor& x, const Tensor& y, Tensor& dy, Tensor& dx) {
  if (pass_through_ || !windows_tile_input() || x.empty()) return backward_consuming(ctx, x, y, dy, dx);
  dx = std::move(x);
  ctx.backend->pool3d_backward(desc(n_), dx.data(), dy.data(), dx.data());
  dy.release();
}

}  // namespace h3d
