// See cpu_few_channel_conv.hpp. The AVX-512 code sits in functions with a
// target attribute (the rest of the build targets the baseline x86-64), and
// runs only where the CPU reports AVX-512F; the OpenMP loops stay outside
// them, so every call into them is one row or one plane.
#include "hybrid3d/backend/cpu/cpu_few_channel_conv.hpp"

#include "hybrid3d/backend/cpu/cpu_avx512.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace h3d {

namespace {

constexpr int kLanes = 16;
constexpr int kRowVectors = 2;  // forward: vectors of one output row per step
constexpr int kTile = 4;        // backward: output channels and taps per register tile
constexpr int kForwardChannels =
    8;  // forward: output channels per register tile (8 x 2 vectors: 127 against 107 GFLOP/s for 4 x 4)
constexpr int64_t kChunkRows = 8;  // backward: rows of a plane per pass over the tiles

// Where each tap (ci, kd, kh, kw) of the window of output (0, 0, 0) lies
// in one sample of the input; an output point adds its own offset.
struct Geometry {
  int64_t in12, in_vol, o12, out_vol, taps;
  std::vector<int64_t> tap_offset;
};

Geometry geometry(const ConvDesc& d) {
  Geometry g;
  g.in12 = d.in[1] * d.in[2];
  g.in_vol = d.in[0] * g.in12;
  g.o12 = d.out[1] * d.out[2];
  g.out_vol = d.out[0] * g.o12;
  g.taps = d.cin * d.k[0] * d.k[1] * d.k[2];
  for (int64_t ci = 0; ci < d.cin; ++ci)
    for (int a = 0; a < d.k[0]; ++a)
      for (int b = 0; b < d.k[1]; ++b)
        for (int e = 0; e < d.k[2]; ++e) g.tap_offset.push_back(ci * g.in_vol + a * g.in12 + b * d.in[2] + e);
  return g;
}

// y = y > 0 ? y : slope * y, as activation_forward's leaky ReLU.
H3D_AVX512 inline __m512 leaky(__m512 v, float slope) {
  const __mmask16 positive = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ);
  return _mm512_mask_blend_ps(positive, _mm512_mul_ps(v, _mm512_set1_ps(slope)), v);
}

// Outputs [w0, w1) of one row of kChannels output channels: `x` at the
// row's first window, `w` at the first channel's weights (taps floats per
// channel), `y` at the first channel's row (channels out_vol apart).
template <int kChannels>
H3D_AVX512 void forward_row(const float* x, const int64_t* offset, int64_t taps, const float* w, const float* b,
                            float slope, float* y, int64_t out_vol, int64_t w0, int64_t w1) {
  for (int64_t ow = w0; ow < w1; ow += kRowVectors * kLanes) {
    __mmask16 m[kRowVectors];
#pragma GCC unroll 16
    for (int v = 0; v < kRowVectors; ++v) m[v] = lanes_below(w1 - ow - v * kLanes);
    __m512 acc[kChannels][kRowVectors];
#pragma GCC unroll 16
    for (int c = 0; c < kChannels; ++c)
#pragma GCC unroll 16
      for (int v = 0; v < kRowVectors; ++v) acc[c][v] = b ? _mm512_set1_ps(b[c]) : _mm512_setzero_ps();
    for (int64_t j = 0; j < taps; ++j) {
      const float* xp = x + offset[j] + ow;
      __m512 xv[kRowVectors];
#pragma GCC unroll 16
      for (int v = 0; v < kRowVectors; ++v) xv[v] = _mm512_maskz_loadu_ps(m[v], xp + v * kLanes);
#pragma GCC unroll 16
      for (int c = 0; c < kChannels; ++c) {
        const __m512 wv = _mm512_set1_ps(w[c * taps + j]);
#pragma GCC unroll 16
        for (int v = 0; v < kRowVectors; ++v) acc[c][v] = _mm512_fmadd_ps(wv, xv[v], acc[c][v]);
      }
    }
#pragma GCC unroll 16
    for (int c = 0; c < kChannels; ++c)
#pragma GCC unroll 16
      for (int v = 0; v < kRowVectors; ++v) {
        const __m512 out = slope > 0.0f ? leaky(acc[c][v], slope) : acc[c][v];
        _mm512_mask_storeu_ps(y + c * out_vol + ow + v * kLanes, m[v], out);
      }
  }
}

// One tile of backward-weights over rows [h0, h1) of a plane: the lane-wise
// sums acc[c][t] (16 floats each, at `acc`, tile-major) of dy of channel c
// times x at tap t, for kChannels channels from `dy` (out_vol apart) and
// kTaps taps.
template <int kChannels, int kTaps>
H3D_AVX512 void weight_tile(const float* dy, int64_t out_vol, int64_t o2, const float* x, const int64_t* offset,
                            int64_t in2, int64_t h0, int64_t h1, float* acc, int64_t acc_stride_channel) {
  // The fixed-count loops are unrolled before GCC decides where the
  // accumulators live: left to -O3 alone, it kept a copy of each on the
  // stack and stored it at every step (103 against 64 GFLOP/s).
  __m512 a[kChannels][kTaps];
#pragma GCC unroll 16
  for (int c = 0; c < kChannels; ++c)
#pragma GCC unroll 16
    for (int t = 0; t < kTaps; ++t) a[c][t] = _mm512_loadu_ps(acc + c * acc_stride_channel + t * kLanes);
  const float* xt[kTaps];
#pragma GCC unroll 16
  for (int t = 0; t < kTaps; ++t) xt[t] = x + offset[t] + h0 * in2;
  const float* g_row = dy + h0 * o2;
  // One loop over the rows' vectors (a nest of two kept the stores too).
  const int64_t vectors = (o2 + kLanes - 1) / kLanes;
  const bool whole_vectors = o2 % kLanes == 0;
  int64_t ow = 0;
  for (int64_t i = 0; i < (h1 - h0) * vectors; ++i) {
    const __mmask16 m = whole_vectors ? __mmask16(0xFFFF) : lanes_below(o2 - ow);
    __m512 g[kChannels];
#pragma GCC unroll 16
    for (int c = 0; c < kChannels; ++c) g[c] = _mm512_maskz_loadu_ps(m, g_row + c * out_vol + ow);
#pragma GCC unroll 16
    for (int t = 0; t < kTaps; ++t) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, xt[t] + ow);
#pragma GCC unroll 16
      for (int c = 0; c < kChannels; ++c) a[c][t] = _mm512_fmadd_ps(g[c], xv, a[c][t]);
    }
    ow += kLanes;
    if (ow >= o2) {
      ow = 0;
      g_row += o2;
#pragma GCC unroll 16
      for (int t = 0; t < kTaps; ++t) xt[t] += in2;
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < kChannels; ++c)
#pragma GCC unroll 16
    for (int t = 0; t < kTaps; ++t) _mm512_storeu_ps(acc + c * acc_stride_channel + t * kLanes, a[c][t]);
}

// The lane-wise sum of one channel's plane of dy (the bias gradient), in
// four running sums (one would wait on the adder's latency at every step),
// added in a fixed order at the end.
H3D_AVX512 void bias_plane(const float* dy, int64_t o1, int64_t o2, float* acc) {
  __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t k = 0;
  for (int64_t h = 0; h < o1; ++h)
    for (int64_t ow = 0; ow < o2; ow += kLanes, ++k)
      s[k % 4] = _mm512_add_ps(s[k % 4], _mm512_maskz_loadu_ps(lanes_below(o2 - ow), dy + h * o2 + ow));
  _mm512_storeu_ps(acc, _mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3])));
}

// The 16 lanes, pairwise in a fixed order.
float lane_sum(const float* acc) {
  float v[kLanes];
  std::copy(acc, acc + kLanes, v);
  for (int width = kLanes / 2; width >= 1; width /= 2)
    for (int i = 0; i < width; ++i) v[i] += v[i + width];
  return v[0];
}

// One plane (sample s, output index od) of backward-weights into `partial`
// (cout * taps weight sums, then cout bias sums); `acc` is scratch of
// (cout * taps + 1) * kLanes floats.
void weight_plane(const ConvDesc& d, const Geometry& g, const float* x, const float* dy, int64_t s, int64_t od,
                  float* partial, float* acc) {
  const int64_t taps = g.taps, stride_channel = taps * kLanes;
  const float* dyp = dy + s * d.cout * g.out_vol + od * g.o12;
  const float* xp = x + s * d.cin * g.in_vol + od * g.in12;
  std::fill(acc, acc + d.cout * stride_channel, 0.0f);
  const int64_t full_co = d.cout / kTile * kTile, full_taps = taps / kTile * kTile;
  for (int64_t h0 = 0; h0 < d.out[1]; h0 += kChunkRows) {
    const int64_t h1 = std::min(d.out[1], h0 + kChunkRows);
    for (int64_t co = 0; co < d.cout; co += co < full_co ? kTile : 1)
      for (int64_t t = 0; t < taps; t += t < full_taps ? kTile : 1) {
        const float* dyc = dyp + co * g.out_vol;
        const int64_t* off = g.tap_offset.data() + t;
        float* a = acc + co * stride_channel + t * kLanes;
        if (co < full_co && t < full_taps)
          weight_tile<kTile, kTile>(dyc, g.out_vol, d.out[2], xp, off, d.in[2], h0, h1, a, stride_channel);
        else if (co < full_co)
          weight_tile<kTile, 1>(dyc, g.out_vol, d.out[2], xp, off, d.in[2], h0, h1, a, stride_channel);
        else if (t < full_taps)
          weight_tile<1, kTile>(dyc, g.out_vol, d.out[2], xp, off, d.in[2], h0, h1, a, stride_channel);
        else
          weight_tile<1, 1>(dyc, g.out_vol, d.out[2], xp, off, d.in[2], h0, h1, a, stride_channel);
      }
  }
  for (int64_t i = 0; i < d.cout * taps; ++i) partial[i] = lane_sum(acc + i * kLanes);
  float* bias_acc = acc + d.cout * stride_channel;
  for (int64_t co = 0; co < d.cout && d.bias; ++co) {
    bias_plane(dyp + co * g.out_vol, d.out[1], d.out[2], bias_acc);
    partial[d.cout * taps + co] = lane_sum(bias_acc);
  }
}

}  // namespace

namespace {
bool applies(const ConvDesc& d, int64_t max_inputs) {
  // H3D_FEW_CHANNEL_CONV=0 sends these shapes to oneDNN (to compare the two).
  const char* env = std::getenv("H3D_FEW_CHANNEL_CONV");
  if (!cpu_has_avx512() || (env && std::strcmp(env, "0") == 0) || d.cin > max_inputs) return false;
  for (int i = 0; i < 3; ++i)
    if (d.stride[size_t(i)] != 1 || d.pad_lo[size_t(i)] != 0 || d.pad_hi[size_t(i)] != 0) return false;
  return true;
}
}  // namespace

bool few_channel_conv_applies(const ConvDesc& d) { return applies(d, kFewChannelMaxInputs); }
bool few_channel_weights_apply(const ConvDesc& d) { return applies(d, kFewChannelWeightsMaxInputs); }

void few_channel_conv_forward(const ConvDesc& d, const float* x, const float* w, const float* b, float* y,
                              const Box& region) {
  if (region.empty()) return;
  const Geometry g = geometry(d);
  const int64_t rows0 = region.r[0].size(), rows1 = region.r[1].size(), rows = d.n * rows0 * rows1;
  const int64_t full_co = d.cout / kForwardChannels * kForwardChannels;
  const float slope = d.fused_leaky_slope;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t s = r / (rows0 * rows1), od = region.r[0].lo + r / rows1 % rows0, oh = region.r[1].lo + r % rows1;
    const float* xr = x + s * d.cin * g.in_vol + od * g.in12 + oh * d.in[2];
    float* yr = y + s * d.cout * g.out_vol + od * g.o12 + oh * d.out[2];
    for (int64_t co = 0; co < d.cout; co += co < full_co ? kForwardChannels : 1) {
      const float* bc = d.bias ? b + co : nullptr;
      if (co < full_co)
        forward_row<kForwardChannels>(xr, g.tap_offset.data(), g.taps, w + co * g.taps, bc, slope, yr + co * g.out_vol,
                                      g.out_vol, region.r[2].lo, region.r[2].hi);
      else
        forward_row<1>(xr, g.tap_offset.data(), g.taps, w + co * g.taps, bc, slope, yr + co * g.out_vol, g.out_vol,
                       region.r[2].lo, region.r[2].hi);
    }
  }
}

int64_t few_channel_conv_partial_floats(const ConvDesc& d) {
  return d.n * d.out[0] * (d.cout * d.cin * d.k[0] * d.k[1] * d.k[2] + d.cout);
}

void few_channel_conv_backward_weights(const ConvDesc& d, const float* x, const float* dy, float* dw, float* db,
                                       float* partials) {
  const Geometry g = geometry(d);
  const int64_t planes = d.n * d.out[0], per_plane = d.cout * g.taps + d.cout;
#pragma omp parallel
  {
    std::vector<float> acc(size_t((d.cout * g.taps + 1) * kLanes));
#pragma omp for schedule(static)
    for (int64_t p = 0; p < planes; ++p)
      weight_plane(d, g, x, dy, p / d.out[0], p % d.out[0], partials + p * per_plane, acc.data());
  }
  // The planes in plane order, in double: the same bits for any thread count.
#pragma omp parallel for schedule(static) if (per_plane > 4096)
  for (int64_t i = 0; i < per_plane; ++i) {
    double sum = 0.0;
    for (int64_t p = 0; p < planes; ++p) sum += double(partials[p * per_plane + i]);
    if (i < d.cout * g.taps)
      dw[i] = float(sum);
    else if (db)
      db[i - d.cout * g.taps] = d.bias ? float(sum) : 0.0f;  // without a bias its partials are never written
  }
}

}  // namespace h3d
