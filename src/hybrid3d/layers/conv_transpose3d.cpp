#include "hybrid3d/layers/conv_transpose3d.hpp"

#include "hybrid3d/core/error.hpp"

namespace h3d {

ConvTranspose3d::ConvTranspose3d(std::string name, ConvTranspose3dOptions o, uint64_t seed)
    : Layer(std::move(name)), o_(o) {
  H3D_USAGE_CHECK(o.kernel >= 1 && o.kernel <= 5, "layer " << name_ << ": kernel " << o.kernel << " is outside 1..5");
  H3D_USAGE_CHECK(o.stride >= 1 && o.stride <= 2, "layer " << name_ << ": stride " << o.stride << " is not 1 or 2");
  H3D_USAGE_CHECK(o.padding >= 0 && o.padding < o.kernel,
                  "layer " << name_ << ": padding " << o.padding << " must be in 0.." << o.kernel - 1);
  H3D_USAGE_CHECK(o.output_padding >= 0 && o.output_padding < o.stride,
                  "layer " << name_ << ": output padding " << o.output_padding << " must be smaller than the stride");
  const int64_t kv = int64_t(o.kernel) * o.kernel * o.kernel;
  // PyTorch's fan-in of a transposed conv weight [Cin, Cout, k^3] is Cout * k^3.
  make_weight_and_bias(name_, {o.in_channels, o.out_channels, o.kernel, o.kernel, o.kernel}, o.out_channels * kv, seed,
                       weight_, o.bias ? &bias_ : nullptr, o.out_channels);
}

std::vector<Param*> ConvTranspose3d::params() {
  if (o_.bias) return {&weight_, &bias_};
  return {&weight_};
}

ActShape ConvTranspose3d::setup(const ActShape& in, const ProcessGrid& grid) {
  H3D_USAGE_CHECK(in.spatial && in.channels == o_.in_channels,
                  "layer " << name_ << " expects " << o_.in_channels << " input channels, got " << in.channels);
  const int s = o_.stride, p = o_.padding, k = o_.kernel;
  std::array<int64_t, 3> extent{};
  std::array<std::vector<int64_t>, 3> bounds, tile_bounds;
  Window3D w{};
  for (int d = 0; d < 3; ++d) {
    const int64_t n = in.dist.extent()[size_t(d)];
    const int64_t m = (n - 1) * s - 2 * p + k + o_.output_padding;
    H3D_USAGE_CHECK(m >= n * s - (s - 1), "layer " << name_ << ": an output extent of " << m << " from " << n
                                                   << " would not cover every input block (use a larger kernel)");
    extent[size_t(d)] = m;
    // The adjoint conv: kernel k, stride s, padding p before; after, what
    // its last window reaches past the output.
    Window1D w1{k, s, p, int(std::max<int64_t>(0, (n - 1) * s - p + k - m))};
    w[size_t(d)] = w1;
    for (int64_t b : in.dist.bounds(d)) bounds[size_t(d)].push_back(std::min(b * s, m));
    if (in.deterministic)
      for (int64_t b : in.tiles.bounds(d)) tile_bounds[size_t(d)].push_back(std::min(b * s, m));
  }
  ActShape out = in;
  out.channels = o_.out_channels;
  out.dist = Distribution(extent, in.dist.grid(), bounds);
  out.dist.require_nonempty(name_);
  deterministic_ = in.deterministic;
  weight_.reduce = bias_.reduce = deterministic_ ? GradReduce::kComplete : GradReduce::kPartialSum;
  if (deterministic_) {
    out.tiles = Distribution(extent, in.tiles.grid(), tile_bounds);
    own_output_.plan(out.dist, w, in.dist, grid.spatial_rank(), name_);
    in_tiles_ = local_tiles(in, grid.spatial_rank());
    out_tiles_ = local_tiles(out, grid.spatial_rank());
  }
  H3D_CHECK(out.dist.through(w, name_) == in.dist, "layer " << name_ << ": the adjoint convolution does not map "
                                                             "the output blocks back onto the input blocks");
  output_.plan(out.dist, w, in.dist, grid.spatial_rank(), 0.0f);
  in_ext_ = in.dist.box(grid.spatial_rank()).extents();
  out_ext_ = out.dist.box(grid.spatial_rank()).extents();
  return out;
}

ConvDesc ConvTranspose3d::adjoint(int64_t n) const {
  ConvDesc d;
  d.n = n;
  d.cin = o_.out_channels;
  d.cout = o_.in_channels;
  d.in = output_.padded_extents();
  d.out = in_ext_;
  d.k = {o_.kernel, o_.kernel, o_.kernel};
  d.stride = {o_.stride, o_.stride, o_.stride};
  d.bias = false;
  return d;
}

void ConvTranspose3d::forward(StepContext& ctx, const Tensor& x, Tensor& y) {
  const int64_t n = x.dim(0);
  const ConvDesc d = adjoint(n);
  if (deterministic_) {
    const Tensor& xg = own_output_.gather(ctx, x);
    y.reshape_uninit({n, o_.out_channels, out_ext_[0], out_ext_[1], out_ext_[2]});
    ctx.backend->conv3d_backward_data(own_output_.geometry(d), xg.data(), weight_.value.data(), y.data());
    own_output_.release();
  } else {
    output_.input_grad(ctx, {n, o_.out_channels, out_ext_[0], out_ext_[1], out_ext_[2]}, y,
                       [&](float* out) { ctx.backend->conv3d_backward_data(d, x.data(), weight_.value.data(), out); });
  }
  if (!o_.bias) return;
  std::vector<float> ones(size_t(o_.out_channels), 1.0f);
  const int64_t v = out_ext_[0] * out_ext_[1] * out_ext_[2];
  ctx.backend->channel_affine(y.data(), n, o_.out_channels, v, ones.data(), bias_.value.data(), y.data());
}

void ConvTranspose3d::backward(StepContext& ctx, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  const int64_t n = x.dim(0);
  const ConvDesc d = adjoint(n);
  const Tensor& dyp = output_.gather(ctx, dy);
  if (deterministic_)
    exact_conv_weight_grad(*ctx.backend, ctx.grid->world(), d, dyp.data(), x.data(), in_tiles_, weight_sum_, weight_.grad.data(),
                           nullptr);
  else
    ctx.backend->conv3d_backward_weights(d, dyp.data(), x.data(), weight_.grad.data(), nullptr);
  if (input_grad_needed_) {
    dx.reshape_uninit({n, o_.in_channels, in_ext_[0], in_ext_[1], in_ext_[2]});
    ctx.backend->conv3d_forward(d, dyp.data(), weight_.value.data(), nullptr, dx.data());
  } else {
    dx.release();
  }
  output_.release();
  if (o_.bias && deterministic_) {
    exact_channel_sums(ctx.grid->world(), dy.data(), n, o_.out_channels, out_ext_, out_tiles_, bias_.grad.data());
  } else if (o_.bias) {
    std::vector<double> sum(size_t(o_.out_channels), 0.0), sumsq(size_t(o_.out_channels), 0.0);
    ctx.backend->channel_moments(dy.data(), n, o_.out_channels, out_ext_[0] * out_ext_[1] * out_ext_[2], sum.data(),
                                 sumsq.data());
    for (int64_t c = 0; c < o_.out_channels; ++c) bias_.grad[c] = float(sum[size_t(c)]);
  }
}

}  // namespace h3d
