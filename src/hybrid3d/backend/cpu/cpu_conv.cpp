// Convolutions on oneDNN in the layouts oneDNN chooses (format "any"):
// on AVX-512 that is nCdhw16c activations and blocked weights, where the
// direct JIT kernels run 2x to 6x faster than the im2col + gemm path that
// plain NCDHW gets (backward-weights for one sample most of all; see
// docs/performance.md). The rest of the engine stays in NCDHW: each call
// reorders its inputs into the chosen layout and its outputs back, which
// costs a few percent of the convolution (bandwidth-bound copies) and one
// staging buffer per argument, freed after the call.
//
// Backward-weights sums over the whole volume. The JIT kernels accumulate
// that sum in fp32 in one long chain, and its rounding then depends on the
// local block shape: the distributed runs drifted past the 1e-5 agreement
// with the serial run. So backward-weights runs on slabs along D of at most
// kReductionPoints output points each, and the slabs' partial gradients are
// summed in double, which is also how a big volume gets small staging
// buffers. Forward splits large outputs (and regions) the same way, into
// slabs of at most max_staging_bytes() of output, and backward-data large
// input gradients into slabs of input planes (each with the output planes
// whose windows touch it) of about as much staging.
//
// The first layer (4 input channels, or 1), stride 1, runs forward and
// backward-weights on our own AVX-512 kernels where the CPU has them
// (cpu_few_channel_conv.hpp says why: oneDNN's layouts for it cost as much
// in reorders as the convolution). Elsewhere it is the exception to "the
// layouts oneDNN picks": for its backward-weights oneDNN 2.6 picks an AVX2
// kernel on 8-channel blocks (28-54 GFLOP/s on this machine's AVX-512
// cores, against 120-270 for the other layers), while on channels-last
// (NDHWC) source and output gradient it has an AVX-512 kernel that runs at
// about 200 on a whole volume (60-100 in bench/conv_kernels, where the
// slabs' staging reorders count). So that pass takes NDHWC for those two
// arguments; the staging reorders them like any other.
#include <algorithm>
#include <cstdlib>
#include <dnnl.hpp>
#include <vector>

#include "hybrid3d/backend/cpu/cpu_dnnl.hpp"
#include "hybrid3d/backend/cpu/cpu_few_channel_conv.hpp"

namespace h3d {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

namespace {

memory::dims dims5(int64_t n, int64_t c, const std::array<int64_t, 3>& e) { return {n, c, e[0], e[1], e[2]}; }
memory::dims dims3(const std::array<int, 3>& v) { return {v[0], v[1], v[2]}; }

// [n, c, e] stored inside a dense [n, c, parent] tensor (parent: empty = e).
memory::desc plain_view(int64_t n, int64_t c, const std::array<int64_t, 3>& e, std::array<int64_t, 3> parent) {
  if (parent[0] == 0) parent = e;
  const int64_t plane = parent[1] * parent[2], vol = parent[0] * plane;
  return memory::desc(dims5(n, c, e), dt::f32, memory::dims{c * vol, vol, plane, parent[2], 1});
}

// Floats that hold a scratchpad of this many bytes.
int64_t scratchpad_floats(const memory::desc& scratch) {
  return int64_t((scratch.get_size() + sizeof(float) - 1) / sizeof(float));
}

constexpr int64_t kReductionPoints = 4096;
// Input channels up to which backward-weights runs on channels-last layouts.
constexpr int64_t kFewChannels = 4;
// 32 MiB; H3D_CONV_STAGING_BYTES sets another limit (the tests take slabs
// of one plane on small shapes).
int64_t max_staging_bytes() {
  const char* env = std::getenv("H3D_CONV_STAGING_BYTES");
  return env ? std::max<int64_t>(1, std::atoll(env)) : int64_t(32) << 20;
}

// Ranges of output planes along D, each as a convolution of its own.
struct DSlab {
  ConvDesc desc;
  std::array<int64_t, 3> in_origin;
  int64_t out0;  // first output plane
};

// Ranges of input planes along D, each with the output planes whose windows
// touch it, as a convolution of its own (backward data). Empty: one call.
struct InSlab {
  ConvDesc desc;
  int64_t in0, out0;  // first input and output plane
};
std::vector<InSlab> in_slabs(const ConvDesc& d) {
  std::vector<InSlab> slabs;
  // Slabs only where every input plane lies under some window (the
  // windows cover the input exactly, and no stride skips a plane): then
  // each slab is a convolution with non-negative padding.
  const int64_t reach = d.in[0] + d.pad_lo[0] + d.pad_hi[0] - d.k[0];
  if (d.k[0] < d.stride[0] || reach < 0 || reach % d.stride[0] != 0) return slabs;
  const int64_t plane_bytes = d.n * (d.cin * d.in[1] * d.in[2] + d.cout * d.out[1] * d.out[2] / d.stride[0]) *
                              int64_t(sizeof(float));
  const int64_t planes = std::max<int64_t>(1, max_staging_bytes() / std::max<int64_t>(1, plane_bytes));
  if (planes >= d.in[0]) return slabs;
  // The outputs whose windows [o * s - p_lo, + k) touch input planes [lo, hi).
  auto floor_div = [](int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
  auto touching = [&](const Range& i) {
    return Range{std::max<int64_t>(0, floor_div(i.lo + d.pad_lo[0] - d.k[0], d.stride[0]) + 1),
                 std::min(d.out[0], floor_div(i.hi - 1 + d.pad_lo[0], d.stride[0]) + 1)};
  };
  for (int64_t a = 0; a < d.in[0]; a += planes) {
    const Range in{a, std::min(d.in[0], a + planes)};
    const Range out = touching(in);
    InSlab sl{d, in.lo, out.lo};
    sl.desc.in[0] = in.size();
    sl.desc.out[0] = out.size();
    // Output j of the slab is output out.lo + j of d, whose window starts
    // at input (out.lo + j) * s - p_lo, the slab's input (that - in.lo).
    sl.desc.pad_lo[0] = int(d.pad_lo[0] + in.lo - out.lo * d.stride[0]);
    sl.desc.pad_hi[0] = int((out.size() - 1) * d.stride[0] + d.k[0] - in.size() - sl.desc.pad_lo[0]);
    if (out.empty() || sl.desc.pad_lo[0] < 0 || sl.desc.pad_hi[0] < 0) return {};  // not a convolution: one call
    slabs.push_back(sl);
  }
  return slabs;
}

std::vector<DSlab> d_slabs(const ConvDesc& d) {
  const int64_t per_plane = d.n * d.out[1] * d.out[2];
  const int64_t planes = std::max<int64_t>(1, kReductionPoints / std::max<int64_t>(1, per_plane));
  std::vector<DSlab> slabs;
  for (int64_t o0 = 0; o0 < d.out[0]; o0 += planes) {
    const Box region{{Range{o0, std::min(d.out[0], o0 + planes)}, Range{0, d.out[1]}, Range{0, d.out[2]}}};
    DSlab s{d, {}, o0};
    s.desc = sub_convolution(d, region, s.in_origin);
    slabs.push_back(s);
  }
  return slabs;
}

}  // namespace

memory StagedArg::input(const dnnl::engine& eng, dnnl::stream& s, const float* p) {
  memory user(plain_, eng, const_cast<float*>(p));
  if (!staged()) return user;
  if (!to_wanted_) to_wanted_.emplace(dnnl::reorder::primitive_desc(eng, plain_, eng, wanted_));
  staging_.reshape_uninit({int64_t(wanted_.get_size() / sizeof(float))});
  memory m(wanted_, eng, staging_.data());
  to_wanted_->execute(s, user, m);
  return m;
}

memory StagedArg::output(const dnnl::engine& eng, float* p) {
  if (!staged()) return memory(plain_, eng, p);
  if (!to_plain_) to_plain_.emplace(dnnl::reorder::primitive_desc(eng, wanted_, eng, plain_));
  staging_.reshape_uninit({int64_t(wanted_.get_size() / sizeof(float))});
  return memory(wanted_, eng, staging_.data());
}

void StagedArg::finish_output(dnnl::stream& s, memory& written, float* p) {
  if (!staged()) return;
  memory user(plain_, written.get_engine(), p);
  to_plain_->execute(s, written, user);
}

namespace {

// The three primitive descriptors of a convolution (forward, backward data,
// backward weights) in the layouts oneDNN picks, with user scratchpads.
// Cheap to make (no kernel is generated): the planner asks for them at
// full size. `like_forward`: a forward implementation to take where oneDNN
// has it for this shape (see conv()).
struct ConvPds {
  memory::desc src, dst, wei;  // the plain views of the caller's buffers
  dnnl::convolution_forward::primitive_desc fwd;
  dnnl::convolution_backward_data::primitive_desc bwd_data;
  dnnl::convolution_backward_weights::primitive_desc bwd_weights;
};

ConvPds conv_pds(const dnnl::engine& eng, const ConvDesc& d, const std::array<int64_t, 3>& src_parent,
                 const std::array<int64_t, 3>& dst_parent, const std::string& like_forward) {
  ConvPds p;
  p.src = plain_view(d.n, d.cin, d.in, src_parent);
  p.dst = plain_view(d.n, d.cout, d.out, dst_parent);
  p.wei = memory::desc({d.cout, d.cin, d.k[0], d.k[1], d.k[2]}, dt::f32, tag::oidhw);
  const memory::desc bia({d.cout}, dt::f32, tag::x);
  // Every shape, tiny ones included, takes the layouts oneDNN picks: its
  // direct kernels compute each output point in the same order whatever
  // the extents, so a region, a slab or a block gives the bits of the
  // whole convolution. (The plain gemm path that tiny outputs once took
  // does not: its sums run in an order that depends on the extents.)
  auto any = [](const memory::desc& m) { return memory::desc(m.dims(), dt::f32, tag::any); };
  const memory::desc no_bias;
  const auto st = dims3(d.stride), pl = dims3(d.pad_lo), pr = dims3(d.pad_hi);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, any(p.src),
                                     any(p.wei), d.bias ? bia : no_bias, any(p.dst), st, pl, pr);
  dnnl::primitive_attr fwd_attr;  // a handle: a copy of attr would share its post-ops
  fwd_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (d.fused_leaky_slope > 0.0f) {
    // oneDNN's relu with a slope: x > 0 ? x : slope * x, the reference's
    // leaky ReLU bit for bit (a slope of 0 would give -0 where the
    // reference gives 0, which is why plain ReLU is not fused).
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, d.fused_leaky_slope, 0.0f);
    fwd_attr.set_post_ops(ops);
  }
  p.fwd = dnnl::convolution_forward::primitive_desc(fd, fwd_attr, eng);
  // A region takes the whole convolution's implementation where oneDNN
  // has it for the region's shape: a 1x1x1 region, say, would otherwise
  // run as an inner product, which sums in another order.
  if (!like_forward.empty()) {
    dnnl::convolution_forward::primitive_desc probe = p.fwd;
    while (probe.impl_info_str() != like_forward && probe.next_impl()) {
    }
    if (probe.impl_info_str() == like_forward) p.fwd = probe;
  }
  dnnl::convolution_backward_data::desc bd(dnnl::algorithm::convolution_direct, any(p.src), any(p.wei), any(p.dst), st,
                                           pl, pr);
  p.bwd_data = dnnl::convolution_backward_data::primitive_desc(bd, attr, eng, p.fwd);
  auto channels_last = [](const memory::desc& m) { return memory::desc(m.dims(), dt::f32, tag::ndhwc); };
  const bool few_channels = d.cin <= kFewChannels;
  dnnl::convolution_backward_weights::desc wd(
      dnnl::algorithm::convolution_direct, few_channels ? channels_last(p.src) : any(p.src), any(p.wei),
      d.bias ? bia : no_bias, few_channels ? channels_last(p.dst) : any(p.dst), st, pl, pr);
  p.bwd_weights = dnnl::convolution_backward_weights::primitive_desc(wd, attr, eng, p.fwd);
  return p;
}

}  // namespace

CpuBackend::Impl::ConvPrims& CpuBackend::Impl::conv(const ConvDesc& d, const std::array<int64_t, 3>& src_parent,
                                                    const std::array<int64_t, 3>& dst_parent, const ConvPrims* like) {
  std::string key = d.key();
  for (int i = 0; i < 3; ++i)
    key += "|" + std::to_string(src_parent[size_t(i)]) + "," + std::to_string(dst_parent[size_t(i)]);
  if (like) key += "|like " + like->forward_impl;
  auto it = convs.find(key);
  if (it != convs.end()) return *it->second;
  auto p = std::make_unique<ConvPrims>();
  dnnl_call("convolution setup", [&] {
    const ConvPds pd = conv_pds(eng, d, src_parent, dst_parent, like ? like->forward_impl : std::string());
    p->forward_impl = pd.fwd.impl_info_str();
    p->fwd_pd = pd.fwd;
    p->bwd_data_pd = pd.bwd_data;
    p->bwd_weights_pd = pd.bwd_weights;
    p->f_src = StagedArg(pd.src, pd.fwd.src_desc());
    p->f_wei = StagedArg(pd.wei, pd.fwd.weights_desc());
    p->f_dst = StagedArg(pd.dst, pd.fwd.dst_desc());
    p->d_ddst = StagedArg(pd.dst, pd.bwd_data.diff_dst_desc());
    p->d_wei = StagedArg(pd.wei, pd.bwd_data.weights_desc());
    p->d_dsrc = StagedArg(pd.src, pd.bwd_data.diff_src_desc());
    p->w_src = StagedArg(pd.src, pd.bwd_weights.src_desc());
    p->w_ddst = StagedArg(pd.dst, pd.bwd_weights.diff_dst_desc());
    p->w_dwei = StagedArg(pd.wei, pd.bwd_weights.diff_weights_desc());
    p->f_scratch = pd.fwd.scratchpad_desc();
    p->d_scratch = pd.bwd_data.scratchpad_desc();
    p->w_scratch = pd.bwd_weights.scratchpad_desc();
  });
  return *convs.emplace(key, std::move(p)).first->second;
}

namespace {

// Runs `prim` on two inputs and one output, each staged through its
// StagedArg (plus `plain`: arguments passed as they are, e.g. the bias),
// with its scratchpad (`scratch`, empty: none) taken from the pool for the
// call, then moves the output to the caller's buffer and frees every
// staging copy.
template <typename Prim>
void run_staged(Prim& prim, const dnnl::engine& eng, dnnl::stream& s, std::pair<int, StagedArg*> in0, const float* p0,
                std::pair<int, StagedArg*> in1, const float* p1, std::pair<int, StagedArg*> out, float* po,
                const memory::desc& scratch, std::unordered_map<int, memory> plain = {}) {
  memory o = out.second->output(eng, po);
  plain.emplace(in0.first, in0.second->input(eng, s, p0));
  plain.emplace(in1.first, in1.second->input(eng, s, p1));
  plain.emplace(out.first, o);
  Tensor pad;
  if (scratch.get_size() > 0) {
    pad.reshape_uninit({scratchpad_floats(scratch)});
    plain.emplace(DNNL_ARG_SCRATCHPAD, memory(scratch, eng, pad.data()));
  }
  prim.execute(s, plain);
  s.wait();
  pad.release();
  in0.second->release();
  in1.second->release();
  out.second->finish_output(s, o, po);
  s.wait();
  out.second->release();
}

memory bias_memory(const ConvDesc& d, const dnnl::engine& eng, const float* b) {
  return memory({{d.cout}, dt::f32, tag::x}, eng, const_cast<float*>(b));
}

// One forward call of (a view of) a convolution.
template <typename Prims>
void forward_once(Prims& p, const dnnl::engine& eng, dnnl::stream& s, const ConvDesc& d, const float* x, const float* w,
                  const float* b, float* y) {
  std::unordered_map<int, memory> bias;
  if (d.bias) bias.emplace(DNNL_ARG_BIAS, bias_memory(d, eng, b));
  run_staged(p.fwd(), eng, s, {DNNL_ARG_SRC, &p.f_src}, x, {DNNL_ARG_WEIGHTS, &p.f_wei}, w, {DNNL_ARG_DST, &p.f_dst}, y,
             p.f_scratch, std::move(bias));
}

}  // namespace

void CpuBackend::conv3d_forward(const ConvDesc& d, const float* x, const float* w, const float* b, float* y) {
  if (few_channel_conv_applies(d)) {
    few_channel_conv_forward(d, x, w, b, y, Box{{Range{0, d.out[0]}, Range{0, d.out[1]}, Range{0, d.out[2]}}});
    return;
  }
  const int64_t plane_bytes = d.n * d.cout * d.out[1] * d.out[2] * int64_t(sizeof(float));
  if (plane_bytes * d.out[0] > max_staging_bytes()) {
    conv3d_forward_region(d, x, w, b, y, Box{{Range{0, d.out[0]}, Range{0, d.out[1]}, Range{0, d.out[2]}}});
    return;
  }
  dnnl_call("convolution forward", [&] { forward_once(impl_->conv(d), impl_->eng, impl_->strm, d, x, w, b, y); });
}

void CpuBackend::conv3d_forward_region(const ConvDesc& d, const float* x, const float* w, const float* b, float* y,
                                       const Box& region) {
  if (region.empty()) return;
  if (few_channel_conv_applies(d)) return few_channel_conv_forward(d, x, w, b, y, region);
  const Impl::ConvPrims& whole = impl_->conv(d);
  // A large region goes in slabs along D, so that its staging copy (in the
  // blocked layout) never doubles the biggest activation of the network.
  const int64_t plane_bytes = d.n * d.cout * region.r[1].size() * region.r[2].size() * int64_t(sizeof(float));
  const int64_t planes = std::max<int64_t>(1, max_staging_bytes() / plane_bytes);
  for (int64_t o0 = region.r[0].lo; o0 < region.r[0].hi; o0 += planes) {
    Box slab = region;
    slab.r[0] = Range{o0, std::min(region.r[0].hi, o0 + planes)};
    std::array<int64_t, 3> o{};
    const ConvDesc s = sub_convolution(d, slab, o);
    // Views into x and y (their strides), staged like any other argument.
    auto& p = impl_->conv(s, d.in, d.out, &whole);
    const float* xs = x + (o[0] * d.in[1] + o[1]) * d.in[2] + o[2];
    float* ys = y + (slab.r[0].lo * d.out[1] + slab.r[1].lo) * d.out[2] + slab.r[2].lo;
    dnnl_call("convolution forward (region)", [&] { forward_once(p, impl_->eng, impl_->strm, s, xs, w, b, ys); });
  }
}

namespace {

// One backward-data call of (a view of) a convolution.
template <typename Prims>
void backward_data_once(Prims& p, const dnnl::engine& eng, dnnl::stream& s, const float* dy, const float* w,
                        float* dx) {
  run_staged(p.bwd_data(), eng, s, {DNNL_ARG_DIFF_DST, &p.d_ddst}, dy, {DNNL_ARG_WEIGHTS, &p.d_wei}, w,
             {DNNL_ARG_DIFF_SRC, &p.d_dsrc}, dx, p.d_scratch);
}

}  // namespace

void CpuBackend::conv3d_backward_data(const ConvDesc& d, const float* dy, const float* w, float* dx) {
  auto& eng = impl_->eng;
  auto& s = impl_->strm;
  const std::vector<InSlab> slabs = in_slabs(d);
  dnnl_call("convolution backward data", [&] {
    if (slabs.empty()) return backward_data_once(impl_->conv(d), eng, s, dy, w, dx);
    // A large input gradient goes in slabs along D, so that the staging
    // copies of dy and dx (in the blocked layouts) never double the
    // network's biggest activations.
    const Impl::ConvPrims& whole = impl_->conv(d);
    const int64_t in_plane = d.in[1] * d.in[2], out_plane = d.out[1] * d.out[2];
    for (const InSlab& sl : slabs) {
      auto& p = impl_->conv(sl.desc, d.in, d.out, &whole);
      backward_data_once(p, eng, s, dy + sl.out0 * out_plane, w, dx + sl.in0 * in_plane);
    }
  });
}

namespace {

// One backward-weights call on (a view of) the whole problem: dw (OIDHW)
// and db overwritten.
template <typename Prims>
void backward_weights_once(Prims& p, const dnnl::engine& eng, dnnl::stream& s, const ConvDesc& d, const float* x,
                           const float* dy, float* dw, float* db) {
  std::unordered_map<int, memory> bias;
  if (d.bias) bias.emplace(DNNL_ARG_DIFF_BIAS, bias_memory(d, eng, db));
  run_staged(p.bwd_weights(), eng, s, {DNNL_ARG_SRC, &p.w_src}, x, {DNNL_ARG_DIFF_DST, &p.w_ddst}, dy,
             {DNNL_ARG_DIFF_WEIGHTS, &p.w_dwei}, dw, p.w_scratch, std::move(bias));
}

}  // namespace

void CpuBackend::conv3d_backward_weights(const ConvDesc& d, const float* x, const float* dy, float* dw, float* db) {
  if (few_channel_weights_apply(d)) {
    Tensor partials;
    partials.reshape_uninit({few_channel_conv_partial_floats(d)});
    few_channel_conv_backward_weights(d, x, dy, dw, db, partials.data());
    return;
  }
  std::vector<float> scratch_bias(size_t(d.cout), 0.0f);
  float* bias_out = db ? db : scratch_bias.data();
  const std::vector<DSlab> slabs = d_slabs(d);
  dnnl_call("convolution backward weights", [&] {
    if (slabs.size() == 1) {
      backward_weights_once(impl_->conv(d), impl_->eng, impl_->strm, d, x, dy, dw, bias_out);
      return;
    }
    const int64_t wn = d.cout * d.cin * d.k[0] * d.k[1] * d.k[2];
    std::vector<double> acc_w(size_t(wn), 0.0), acc_b(size_t(d.cout), 0.0);
    Tensor part_w({wn});
    std::vector<float> part_b(size_t(d.cout));
    const int64_t in_plane = d.in[1] * d.in[2], out_plane = d.out[1] * d.out[2];
    for (const DSlab& sl : slabs) {
      auto& p = impl_->conv(sl.desc, d.in, d.out);
      backward_weights_once(p, impl_->eng, impl_->strm, sl.desc, x + sl.in_origin[0] * in_plane,
                            dy + sl.out0 * out_plane, part_w.data(), part_b.data());
      const float* pw = part_w.data();
#pragma omp parallel for schedule(static) if (wn > 65536)
      for (int64_t i = 0; i < wn; ++i) acc_w[size_t(i)] += pw[i];
      if (d.bias)
        for (int64_t co = 0; co < d.cout; ++co) acc_b[size_t(co)] += part_b[size_t(co)];
    }
    for (int64_t i = 0; i < wn; ++i) dw[i] = float(acc_w[size_t(i)]);
    for (int64_t co = 0; co < d.cout; ++co) bias_out[co] = float(acc_b[size_t(co)]);
  });
  if (!d.bias && db)
    for (int64_t co = 0; co < d.cout; ++co) db[co] = 0.0f;
}

// What the calls above take from the pool while they run, in the order
// they take it: for backward weights in slabs the partial weights, then the
// staged output, the two staged inputs and the scratchpad of one primitive
// call (of the first slab where the call goes in slabs). Asked of the
// primitive descriptors of the real shapes, which oneDNN makes without
// generating a kernel: microseconds and no memory even at 512^3.
std::vector<int64_t> CpuBackend::conv3d_staging(const ConvDesc& whole, ConvPass pass) {
  ConvDesc d = whole;
  std::array<int64_t, 3> src_parent{}, dst_parent{};
  std::string like;
  std::vector<int64_t> out;
  if (pass == ConvPass::kBackwardWeights && few_channel_weights_apply(whole))  // no staging; per-plane sums
    return {few_channel_conv_partial_floats(whole)};
  if (pass == ConvPass::kForward && few_channel_conv_applies(whole)) return out;
  dnnl_call("convolution staging", [&] {
    if (pass == ConvPass::kForward) {  // the first slab, as conv3d_forward goes
      const int64_t plane_bytes = d.n * d.cout * d.out[1] * d.out[2] * int64_t(sizeof(float));
      if (plane_bytes * d.out[0] > max_staging_bytes()) {
        const int64_t planes = std::max<int64_t>(1, max_staging_bytes() / plane_bytes);
        std::array<int64_t, 3> o{};
        d = sub_convolution(whole, Box{{Range{0, std::min(planes, d.out[0])}, Range{0, d.out[1]}, Range{0, d.out[2]}}},
                            o);
        src_parent = whole.in, dst_parent = whole.out;
        like = conv_pds(impl_->eng, whole, {}, {}, "").fwd.impl_info_str();
      }
    } else if (pass == ConvPass::kBackwardData) {  // the first slab, as conv3d_backward_data goes
      const std::vector<InSlab> slabs = in_slabs(whole);
      if (!slabs.empty()) {
        d = slabs[0].desc;
        src_parent = whole.in, dst_parent = whole.out;
        like = conv_pds(impl_->eng, whole, {}, {}, "").fwd.impl_info_str();
      }
    } else if (pass == ConvPass::kBackwardWeights) {
      const std::vector<DSlab> slabs = d_slabs(whole);
      if (slabs.size() > 1) {
        d = slabs[0].desc;
        src_parent = whole.in, dst_parent = whole.out;
        out.push_back(d.cout * d.cin * d.k[0] * d.k[1] * d.k[2]);  // the partial weights
      }
    }
    const ConvPds pd = conv_pds(impl_->eng, d, src_parent, dst_parent, like);
    auto staged = [&out](const memory::desc& plain, const memory::desc& wanted) {
      if (plain != wanted) out.push_back(int64_t(wanted.get_size() / sizeof(float)));
    };
    auto scratch = [&out](const memory::desc& m) {
      if (m.get_size() > 0) out.push_back(scratchpad_floats(m));
    };
    if (pass == ConvPass::kForward) {
      staged(pd.dst, pd.fwd.dst_desc()), staged(pd.src, pd.fwd.src_desc()), staged(pd.wei, pd.fwd.weights_desc());
      scratch(pd.fwd.scratchpad_desc());
    } else if (pass == ConvPass::kBackwardData) {
      staged(pd.src, pd.bwd_data.diff_src_desc()), staged(pd.dst, pd.bwd_data.diff_dst_desc());
      staged(pd.wei, pd.bwd_data.weights_desc()), scratch(pd.bwd_data.scratchpad_desc());
    } else {
      staged(pd.wei, pd.bwd_weights.diff_weights_desc()), staged(pd.src, pd.bwd_weights.src_desc());
      staged(pd.dst, pd.bwd_weights.diff_dst_desc()), scratch(pd.bwd_weights.scratchpad_desc());
    }
  });
  return out;
}

}  // namespace h3d
