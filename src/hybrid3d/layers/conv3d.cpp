#include "hybrid3d/layers/conv3d.hpp"

#include <cstdlib>
#include <string>

#include "hybrid3d/core/error.hpp"

namespace h3d {

Conv3d::Conv3d(std::string name, Conv3dOptions o, uint64_t seed) : Layer(std::move(name)), o_(o) {
  H3D_USAGE_CHECK(o.kernel >= 1 && o.kernel <= 5, "layer " << name_ << ": kernel " << o.kernel << " is outside 1..5");
  H3D_USAGE_CHECK(o.stride == 1 || o.stride == 2, "layer " << name_ << ": stride " << o.stride << " is not 1 or 2");
  const int64_t kv = int64_t(o.kernel) * o.kernel * o.kernel;
  make_weight_and_bias(name_, {o.out_channels, o.in_channels, o.kernel, o.kernel, o.kernel}, o.in_channels * kv, seed,
                       weight_, o.bias ? &bias_ : nullptr, o.out_channels);
}

std::vector<Param*> Conv3d::params() {
  if (o_.bias) return {&weight_, &bias_};
  return {&weight_};
}

ActShape Conv3d::setup(const ActShape& in, const ProcessGrid& grid) {
  H3D_USAGE_CHECK(in.spatial && in.channels == o_.in_channels,
                  "layer " << name_ << " expects " << o_.in_channels << " input channels, got " << in.channels);
  Window1D w1 = make_window(o_.kernel, o_.stride, o_.padding);
  Window3D w{w1, w1, w1};
  ActShape out = in.through(w, name_);
  out.channels = o_.out_channels;
  input_.plan(in.dist, w, out.dist, grid.spatial_rank(), 0.0f);
  deterministic_ = in.deterministic;
  const GradReduce reduce = deterministic_ ? GradReduce::kComplete : GradReduce::kPartialSum;
  weight_.reduce = bias_.reduce = reduce;
  if (deterministic_) {
    out_tiles_ = local_tiles(out, grid.spatial_rank());
    own_grad_.plan(in.dist, w, out.dist, grid.spatial_rank(), name_);
  }
  out_ext_ = out.dist.box(grid.spatial_rank()).extents();
  in_ext_ = in.dist.box(grid.spatial_rank()).extents();
  in_dist_ = in.dist;
  out_dist_ = out.dist;
  stream_.reset();
  return out;
}

bool Conv3d::stream_through(const Pool3d& pool, const ActShape& pool_out, int spatial_rank) {
  // H3D_STREAM_FIRST_LAYER=0 keeps the layers apart (for A/B and the tests).
  const char* env = std::getenv("H3D_STREAM_FIRST_LAYER");
  if (env && std::string(env) == "0") return false;
  if (input_grad_needed_ || deterministic_ || o_.stride != 1 || !pool_out.spatial) return false;
  // Max pooling records one byte per output, and streams where its windows
  // tile the volume (cosmoflow's 2x2x2): there the recorded cells are all
  // its backward needs; overlapping or padded windows have only the
  // backends' plain loops for that.
  const Window1D& pw = pool.window();
  if (pool.kind() == PoolKind::kMax && (pw.k != pw.s || pw.p_lo != 0 || pw.p_hi != 0)) return false;
  const Window1D conv = make_window(o_.kernel, o_.stride, o_.padding);
  const Window1D both = ConvPoolStream::composed(conv, pool.window());
  input_.plan(in_dist_, Window3D{both, both, both}, pool_out.dist, spatial_rank, 0.0f);
  ConvPoolStream::Geometry g;
  g.cin = o_.in_channels;
  g.cout = o_.out_channels;
  g.conv = conv;
  g.pool = pool.window();
  g.pool_kind = pool.kind();
  g.bias = o_.bias;
  g.leaky_slope = fused_leaky_slope_;
  g.own_out = pool_out.dist.box(spatial_rank);
  g.padded_in = input_.padded_box();
  const auto& e = out_dist_.extent();
  g.conv_volume = Box{{Range{0, e[0]}, Range{0, e[1]}, Range{0, e[2]}}};
  stream_ = std::make_unique<ConvPoolStream>();
  stream_->plan(g);
  stream_out_ext_ = g.own_out.extents();
  return true;
}

ConvDesc Conv3d::desc(int64_t n) const {
  ConvDesc d;
  d.n = n;
  d.cin = o_.in_channels;
  d.cout = o_.out_channels;
  d.in = input_.padded_extents();
  d.out = out_ext_;
  d.k = {o_.kernel, o_.kernel, o_.kernel};
  d.stride = {o_.stride, o_.stride, o_.stride};
  d.bias = o_.bias;
  d.fused_leaky_slope = fused_leaky_slope_;
  return d;
}

void Conv3d::forward_overlapped(StepContext& ctx, const Tensor& x, Tensor* consumable, Tensor& y) {
  n_ = x.dim(0);
  if (stream_) {
    const Tensor& xp = consumable ? input_.gather_consuming(ctx, *consumable) : input_.gather(ctx, x);
    y.reshape_uninit({n_, o_.out_channels, stream_out_ext_[0], stream_out_ext_[1], stream_out_ext_[2]});
    stream_->forward(*ctx.backend, ctx.training, n_, xp.data(), weight_.value.data(),
                     o_.bias ? bias_.value.data() : nullptr, y.data());
    return;
  }
  y.reshape_uninit({n_, o_.out_channels, out_ext_[0], out_ext_[1], out_ext_[2]});
  const ConvDesc d = desc(n_);
  const float* b = o_.bias ? bias_.value.data() : nullptr;
  if (!ctx.overlap_halo) {
    const Tensor& xp =
        consumable ? input_.gather_consuming(ctx, *consumable) : input_.gather(ctx, x);
    ctx.backend->conv3d_forward(d, xp.data(), weight_.value.data(), b, y.data());
    return;
  }
  const Box all = input_.output_box();
  input_.gather_overlapped(ctx, x, consumable, [&](const Tensor& xp, const Box& region) {
    if (region == all)
      ctx.backend->conv3d_forward(d, xp.data(), weight_.value.data(), b, y.data());
    else
      ctx.backend->conv3d_forward_region(d, xp.data(), weight_.value.data(), b, y.data(), region);
  });
}

void Conv3d::forward(StepContext& ctx, const Tensor& x, Tensor& y) {
  forward_overlapped(ctx, x, nullptr, y);
}

void Conv3d::forward_consuming(StepContext& ctx, Tensor& x, Tensor& y) {
  forward_overlapped(ctx, x, &x, y);
  x.release();  // gone already unless the layer has no halo
}

void Conv3d::backward_deterministic(StepContext& ctx, const Tensor& x, const Tensor& dy, Tensor& dx) {
  const ConvDesc d = desc(n_);
  exact_conv_weight_grad(*ctx.backend, ctx.grid->world(), d, input_.saved(x).data(), dy.data(), out_tiles_, weight_sum_,
                         weight_.grad.data(), o_.bias ? bias_.grad.data() : nullptr);
  input_.release();
  if (!input_grad_needed_) {
    dx.release();
    return;
  }
  const Tensor& g = own_grad_.gather(ctx, dy);
  dx.reshape_uninit({n_, o_.in_channels, in_ext_[0], in_ext_[1], in_ext_[2]});
  ctx.backend->conv3d_backward_data(own_grad_.geometry(d), g.data(), weight_.value.data(), dx.data());
  own_grad_.release();
}

void Conv3d::backward_streamed(StepContext& ctx, const Tensor& x, const Tensor& dy, Tensor& dx) {
  stream_->backward(*ctx.backend, n_, input_.saved(x).data(), dy.data(), weight_.grad.data(),
                    o_.bias ? bias_.grad.data() : nullptr);
  input_.release();
  stream_->release();
  dx.release();
}

void Conv3d::backward(StepContext& ctx, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  if (deterministic_) return backward_deterministic(ctx, x, dy, dx);
  if (stream_) return backward_streamed(ctx, x, dy, dx);
  ConvDesc d = desc(n_);
  auto weight_grad = [&] {
    ctx.backend->conv3d_backward_weights(d, input_.saved(x).data(), dy.data(), weight_.grad.data(),
                                         o_.bias ? bias_.grad.data() : nullptr);
  };
  if (!input_grad_needed_) {
    weight_grad();
    input_.release();
    dx.release();
    return;
  }
  auto data_grad = [&](float* out) { ctx.backend->conv3d_backward_data(d, dy.data(), weight_.value.data(), out); };
  if (input_.trivial() || !ctx.overlap_halo) {
    // Nothing to overlap (or the blocking baseline): the weight gradient
    // first, so that the input gradient may reuse the input's buffer.
    weight_grad();
    input_.release();
    input_.input_grad(ctx, {n_, o_.in_channels, in_ext_[0], in_ext_[1], in_ext_[2]}, dx, data_grad);
    return;
  }
  // The halo part of the input gradient goes back to its owners while the
  // weight gradient is computed.
  input_.input_grad(ctx, {n_, o_.in_channels, in_ext_[0], in_ext_[1], in_ext_[2]}, dx, data_grad,
                    weight_grad);
}

}  // namespace h3d
