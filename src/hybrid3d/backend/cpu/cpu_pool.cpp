// CPU pooling: the reference semantics (window order, first maximum,
// average over the whole window including padding cells) in loops shaped
// for the memory system. The layers pass an already padded input (PoolDesc
// padding 0), except for average pooling on a block whose only halo is the
// global edge's zero padding: that pads inside the kernel, doing exactly
// the additions the padded copy would see (so the bits are the same),
// without the copy in and the copy of the gradient out (cosmoflow-lbann's
// first pooling moved 2 x 134 MB per sample that way). Max pooling with
// padding goes to the reference.
//
// Forward is separable: for each output row, the k0 x k1 input rows of its
// windows are reduced element by element (contiguous, vectorised) into a
// row buffer, and the buffer is then reduced along W. Average backward is
// the same in reverse, computed per input plane (a gather, so planes are
// independent and every dx value is written once). Max backward finds the
// first maximum of each window in window order; when the windows tile the
// input (kernel = stride, as in cosmoflow) each window writes all of its
// cells, so dx needs no separate zeroing pass; 2x2x2 tiles go a row of
// windows at a time with masks instead of branches (2.6x faster on random
// data: 95 -> 36 ms for cosmoflow's pool1, 32 x 128^3, on 2 threads).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "hybrid3d/backend/cpu/cpu_avx512.hpp"
#include "hybrid3d/backend/cpu/cpu_backend.hpp"

namespace h3d {

namespace {

// Extents in0..in2 are the padded input's; the stored input is the box
// [lo, lo + ext) of it (the whole of it when unpadded).
struct PoolGeom {
  int64_t in0, in1, in2, out0, out1, out2;
  int k0, k1, k2, s0, s1, s2;
  std::array<int64_t, 3> lo{}, ext{};
  bool padded() const { return ext[0] != in0 || ext[1] != in1 || ext[2] != in2; }
  int64_t stored_vol() const { return ext[0] * ext[1] * ext[2]; }
  int64_t in_vol() const { return in0 * in1 * in2; }
  int64_t out_vol() const { return out0 * out1 * out2; }
  // Offset of the window's first cell for output (oz, oy, ox).
  int64_t origin(int64_t oz, int64_t oy, int64_t ox) const { return ((oz * s0) * in1 + oy * s1) * in2 + ox * s2; }
  bool tiles() const {
    return k0 == s0 && k1 == s1 && k2 == s2 && out0 * s0 == in0 && out1 * s1 == in1 && out2 * s2 == in2;
  }
};

bool unpadded(const PoolDesc& d) {
  for (int i = 0; i < 3; ++i)
    if (d.pad_lo[i] || d.pad_hi[i]) return false;
  return true;
}

PoolGeom pool_geom(const PoolDesc& d) {
  PoolGeom g{d.in[0] + d.pad_lo[0] + d.pad_hi[0],
             d.in[1] + d.pad_lo[1] + d.pad_hi[1],
             d.in[2] + d.pad_lo[2] + d.pad_hi[2],
             d.out[0],
             d.out[1],
             d.out[2],
             d.k[0],
             d.k[1],
             d.k[2],
             d.stride[0],
             d.stride[1],
             d.stride[2]};
  g.lo = {d.pad_lo[0], d.pad_lo[1], d.pad_lo[2]};
  g.ext = d.in;
  return g;
}

// Offset of the first maximum of the window at `base`, in window order.
inline int64_t first_max(const PoolGeom& g, const float* xc, int64_t base) {
  int64_t arg = base;
  float best = xc[base];
  for (int a = 0; a < g.k0; ++a)
    for (int b = 0; b < g.k1; ++b) {
      const int64_t row = base + (a * g.in1 + b) * g.in2;
      for (int c = 0; c < g.k2; ++c)
        if (xc[row + c] > best) {
          best = xc[row + c];
          arg = row + c;
        }
    }
  return arg;
}

// The output windows along one dimension that contain input index i.
inline void covering(int64_t i, int k, int s, int64_t out, int64_t& first, int64_t& last) {
  first = std::max<int64_t>(0, (i - k + s) / s);  // ceil((i - k + 1) / s) for i >= k - 1
  if (i < k - 1) first = 0;
  last = std::min<int64_t>(out - 1, i / s);
}

// Row (z, y) of the padded input (padded coordinates) in the stored
// input, or null where it is padding.
inline const float* stored_row(const PoolGeom& g, const float* xc, int64_t z, int64_t y) {
  const int64_t zs = z - g.lo[0], ys = y - g.lo[1];
  if (zs < 0 || zs >= g.ext[0] || ys < 0 || ys >= g.ext[1]) return nullptr;
  return xc + (zs * g.ext[1] + ys) * g.ext[2];
}

// r (a padded row, in2 floats) = or += padded row (z, y), with exactly
// the additions the padded copy would see: its zeros added where r holds
// padding (those cells stay +0) and a whole row of padding added as +0
// (which turns a -0 in r into +0, as there).
inline void add_padded_row(const PoolGeom& g, const float* xc, int64_t z, int64_t y, bool first, float* r) {
  const float* src = stored_row(g, xc, z, y);
  if (first) {
    std::fill(r, r + g.in2, 0.0f);
    if (src) std::copy(src, src + g.ext[2], r + g.lo[2]);
  } else if (src) {
    float* ri = r + g.lo[2];
    for (int64_t i = 0; i < g.ext[2]; ++i) ri[i] += src[i];
  } else {
    for (int64_t i = 0; i < g.in2; ++i) r[i] += 0.0f;
  }
}

// p with p + lo on the 64-byte boundary at or below `end`: p lies in
// (end - lo - 16, end - lo] (in floats).
inline float* aligned_before(float* end, int64_t lo) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(end) / 64 * 64;
  return reinterpret_cast<float*>(at) - lo;
}

// K, S > 0: the W kernel and stride at compile time (the W windows then
// vectorise).
template <bool kMax, int K, int S>
void forward_rows(const PoolGeom& g, const float* x, float* y, int64_t planes) {
  const int k2 = K ? K : g.k2, s2 = S ? S : g.s2;
  const float inv = 1.0f / float(g.k0 * g.k1 * g.k2);
  const bool padded = g.padded();  // average pooling only (zero padding)
#pragma omp parallel
  {
    // The padded row r starts so that its stored cells (r + lo[2]) lie on
    // a cache line, as the stored rows do when their length is a multiple
    // of 16: the additions then neither split lines nor vectors.
    const int64_t lo2 = padded ? g.lo[2] : 0;
    std::vector<float> row(size_t(g.in2 + 16));
    float* const r_start = aligned_before(row.data() + lo2 + 16, lo2);
#pragma omp for collapse(2) schedule(static)
    for (int64_t nc = 0; nc < planes; ++nc)
      for (int64_t oz = 0; oz < g.out0; ++oz) {
        const float* xc = x + nc * (padded ? g.stored_vol() : g.in_vol());
        float* yp = y + nc * g.out_vol() + oz * g.out1 * g.out2;
        for (int64_t oy = 0; oy < g.out1; ++oy) {
          float* r = r_start;
          for (int a = 0; a < g.k0; ++a)
            for (int b = 0; b < g.k1; ++b) {
              if (padded) {
                add_padded_row(g, xc, oz * g.s0 + a, oy * g.s1 + b, a == 0 && b == 0, r);
                continue;
              }
              const float* src = xc + g.origin(oz, oy, 0) + (a * g.in1 + b) * g.in2;
              if (a == 0 && b == 0)
                std::copy(src, src + g.in2, r);
              else
                for (int64_t i = 0; i < g.in2; ++i) r[i] = kMax ? std::max(r[i], src[i]) : r[i] + src[i];
            }
          float* yr = yp + oy * g.out2;
          for (int64_t ox = 0; ox < g.out2; ++ox) {
            const float* w = r + ox * s2;
            float acc = w[0];
            for (int c = 1; c < k2; ++c) acc = kMax ? std::max(acc, w[c]) : acc + w[c];
            yr[ox] = kMax ? acc : acc * inv;
          }
        }
      }
  }
}

// The gradient g of a cell holding x, through the ReLU of `slope` that
// produced x (PoolDesc::relu_grad_slope; < 0: none), as
// masked_slope_backward computes it.
inline float through_relu(float x, float g, float slope) { return slope < 0.0f || x > 0.0f ? g : slope * g; }

// Windows tiling the input: each window's first maximum by comparison,
// then all of its cells written.
void max_backward_tiled(const PoolGeom& g, const float* x, const float* dy, float* dx, int64_t planes, float slope) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t nc = 0; nc < planes; ++nc)
    for (int64_t oz = 0; oz < g.out0; ++oz) {
      const float* xc = x + nc * g.in_vol();
      float* dxc = dx + nc * g.in_vol();
      const float* dyp = dy + nc * g.out_vol() + oz * g.out1 * g.out2;
      for (int64_t oy = 0; oy < g.out1; ++oy)
        for (int64_t ox = 0; ox < g.out2; ++ox) {
          const int64_t base = g.origin(oz, oy, ox);
          const int64_t arg = first_max(g, xc, base);
          const float gy = through_relu(xc[arg], dyp[oy * g.out2 + ox], slope);  // read before dx may overwrite x
          for (int a = 0; a < g.k0; ++a)
            for (int b = 0; b < g.k1; ++b)
              for (int c = 0; c < g.k2; ++c) {
                const int64_t i = base + (a * g.in1 + b) * g.in2 + c;
                dxc[i] = i == arg ? gy : 0.0f;
              }
        }
    }
}

// 2x2x2 windows tiling the input (cosmoflow's pooling), without branches
// and a whole output row at a time, so that the loops vectorise: the data
// decides every comparison, and a branch per cell (as above) mispredicts
// about half the time. The maximum is taken in window order with the
// reference's own comparison (`v > best`, so a NaN after a window's first
// cell is passed over as there); the first cell equal to it is the
// reference's first maximum. Only a NaN first cell leaves no cell equal to
// the maximum: that cell takes the gradient then, as in the reference.
void max_backward_tiled_2(const PoolGeom& g, const float* x, const float* dy, float* dx, int64_t planes, float slope) {
  const int64_t w = g.out2;
#pragma omp parallel
  {
    std::vector<float> best_row(static_cast<size_t>(w)), scaled_row(static_cast<size_t>(w));
    std::vector<uint32_t> taken_row(static_cast<size_t>(w)), grad_row(static_cast<size_t>(w)),
        out_row(static_cast<size_t>(2 * w));
#pragma omp for collapse(2) schedule(static)
    for (int64_t nc = 0; nc < planes; ++nc)
      for (int64_t oz = 0; oz < g.out0; ++oz) {
        const float* xc = x + nc * g.in_vol();
        float* dxc = dx + nc * g.in_vol();
        const float* dyp = dy + nc * g.out_vol() + oz * g.out1 * g.out2;
        float* __restrict best = best_row.data();
        float* __restrict scaled = scaled_row.data();
        uint32_t* __restrict taken = taken_row.data();
        uint32_t* __restrict grad = grad_row.data();
        uint32_t* __restrict out = out_row.data();
        for (int64_t oy = 0; oy < g.out1; ++oy) {
          // The four input rows of this output row, in window order (a, b).
          const int64_t r0 = g.origin(oz, oy, 0);
          const int64_t rows[4] = {r0, r0 + g.in2, r0 + g.in1 * g.in2, r0 + (g.in1 + 1) * g.in2};
          const float* gy = dyp + oy * g.out2;
          const float* x0 = xc + rows[0];
          for (int64_t ox = 0; ox < w; ++ox) {
            const float v0 = x0[2 * ox], v1 = x0[2 * ox + 1];
            best[ox] = v1 > v0 ? v1 : v0;
            taken[ox] = 0;
          }
          for (int r = 1; r < 4; ++r) {
            const float* xr = xc + rows[r];
            for (int64_t ox = 0; ox < w; ++ox) {
              const float v0 = xr[2 * ox], v1 = xr[2 * ox + 1];
              float m = best[ox];
              m = v0 > m ? v0 : m;
              best[ox] = v1 > m ? v1 : m;
            }
          }
          // Masks rather than branches, on the bits (0.0f where no hit, as
          // the reference writes, whatever the gradient's sign), into a row
          // buffer that is then copied out.
          if (slope >= 0.0f) {  // the ReLU's gradient, from the window's maximum (read before dx may overwrite x)
            for (int64_t ox = 0; ox < w; ++ox) scaled[ox] = best[ox] > 0.0f ? gy[ox] : slope * gy[ox];
            std::memcpy(grad, scaled, size_t(w) * sizeof(float));
          } else {
            std::memcpy(grad, gy, size_t(w) * sizeof(float));
          }
          for (int r = 0; r < 4; ++r) {
            const float* __restrict xr = xc + rows[r];
            for (int64_t ox = 0; ox < w; ++ox) {
              const uint32_t m0 = (0u - uint32_t(xr[2 * ox] == best[ox])) & ~taken[ox];
              const uint32_t t0 = taken[ox] | m0;
              const uint32_t m1 = (0u - uint32_t(xr[2 * ox + 1] == best[ox])) & ~t0;
              taken[ox] = t0 | m1;
              out[2 * ox] = grad[ox] & m0;
              out[2 * ox + 1] = grad[ox] & m1;
            }
            std::memcpy(dxc + rows[r], out, size_t(2 * w) * sizeof(float));
          }
          uint32_t all = ~0u;
          for (int64_t ox = 0; ox < w; ++ox) all &= taken[ox];
          if (!all)
            for (int64_t ox = 0; ox < w; ++ox)
              if (!taken[ox]) std::memcpy(&dxc[rows[0] + 2 * ox], &grad[ox], sizeof(float));
        }
      }
  }
}

void max_backward_scatter(const PoolGeom& g, const float* x, const float* dy, float* dx, int64_t planes, float slope) {
  // Overlapping windows (or cells no window reads): zero, then add. Windows
  // overlap only within a channel, so channels are independent.
#pragma omp parallel for schedule(static)
  for (int64_t nc = 0; nc < planes; ++nc) {
    float* dxc = dx + nc * g.in_vol();
    const float* xc = x + nc * g.in_vol();
    const float* dyc = dy + nc * g.out_vol();
    std::fill(dxc, dxc + g.in_vol(), 0.0f);
    for (int64_t oz = 0; oz < g.out0; ++oz)
      for (int64_t oy = 0; oy < g.out1; ++oy)
        for (int64_t ox = 0; ox < g.out2; ++ox)
          dxc[first_max(g, xc, g.origin(oz, oy, ox))] += dyc[(oz * g.out1 + oy) * g.out2 + ox];
    if (slope >= 0.0f)
      for (int64_t i = 0; i < g.in_vol(); ++i) dxc[i] = through_relu(xc[i], dxc[i], slope);
  }
}

// sr (zeros) += each dy[ox] * inv over the W cells of window ox, in
// order of ox. For windows of 3 with stride 2 the same sums are gathered
// (cell 2j has windows j - 1 and j, cell 2j + 1 window j), which
// vectorises; the additions and their order are the same, from +0.
template <int K, int S>
inline void spread_row(const float* dy, int64_t out2, int k2, int s2, float inv, float* sr) {
  if constexpr (K == 3 && S == 2) {
    if (out2 == 0) return;
    sr[0] = 0.0f + dy[0] * inv;
    sr[1] = 0.0f + dy[0] * inv;
    for (int64_t j = 1; j < out2; ++j) {
      const float prev = dy[j - 1] * inv, v = dy[j] * inv;
      sr[2 * j] = (0.0f + prev) + v;
      sr[2 * j + 1] = 0.0f + v;
    }
    sr[2 * out2] = 0.0f + dy[out2 - 1] * inv;
  } else {
    for (int64_t ox = 0; ox < out2; ++ox) {
      const float v = dy[ox] * inv;
      for (int c = 0; c < k2; ++c) sr[ox * s2 + c] += v;
    }
  }
}

// K, S > 0: the W kernel and stride at compile time (the loops unroll).
// The gradient of every cell of the padded input is what it would be with
// a padded copy; only the stored cells are written.
template <int K, int S>
void avg_backward_gather(const PoolGeom& g, const float* dy, float* dx, int64_t planes) {
  const int k2 = K ? K : g.k2, s2 = S ? S : g.s2;
  const float inv = 1.0f / float(g.k0 * g.k1 * g.k2);
  const int64_t plane = g.ext[1] * g.ext[2];
#pragma omp parallel
  {
    // W-spread rows of one dy plane: spread[oy][x] = sum over ox covering
    // x. The two most recent planes' are kept: consecutive input planes
    // share windows (each spread was computed up to k0 times before).
    // Rows of a whole number of cache lines, each row's stored cells (from
    // lo[2]) starting on one, as the dx rows do when their length is a
    // multiple of 16.
    // The two spreads lie one after the other (a spread is a whole number
    // of rows, so the second is aligned as the first).
    const int64_t pitch = (g.in2 + 15) / 16 * 16 + 16, lo2 = g.lo[2], spread_size = g.out1 * pitch;
    std::vector<float> spread_buffer(size_t(2 * spread_size + lo2 + 16));
    float* const first_spread = aligned_before(spread_buffer.data() + lo2 + 16, lo2);
    float* const starts[2] = {first_spread, first_spread + spread_size};
    int64_t spread_of[2] = {-1, -1};  // nc * out0 + oz of each, -1: none
    int next_slot = 0;
#pragma omp for collapse(2) schedule(static)
    for (int64_t nc = 0; nc < planes; ++nc)
      for (int64_t zs = 0; zs < g.ext[0]; ++zs) {
        const int64_t z = zs + g.lo[0];
        float* dxp = dx + nc * g.stored_vol() + zs * plane;
        int64_t oz0, oz1;
        covering(z, g.k0, g.s0, g.out0, oz0, oz1);
        if (oz0 > oz1) std::fill(dxp, dxp + plane, 0.0f);
        // Each cell is 0 plus its windows' shares in order, as if dx were
        // zeroed first; the first share is written as 0.0f + share (a -0
        // share gives +0 there too) instead of a pass of zeros.
        for (int64_t oz = oz0; oz <= oz1; ++oz) {
          const int64_t key = nc * g.out0 + oz;
          const int slot = spread_of[0] == key ? 0 : spread_of[1] == key ? 1 : -1;
          float* const spread = starts[slot >= 0 ? slot : next_slot];
          if (slot < 0) {
            spread_of[next_slot] = key;
            next_slot ^= 1;
            const float* dyp = dy + nc * g.out_vol() + oz * g.out1 * g.out2;
            std::fill(spread, spread + spread_size, 0.0f);
            for (int64_t oy = 0; oy < g.out1; ++oy)
              spread_row<K, S>(dyp + oy * g.out2, g.out2, k2, s2, inv, spread + oy * pitch);
          }
          for (int64_t ys = 0; ys < g.ext[1]; ++ys) {
            int64_t oy0, oy1;
            covering(ys + g.lo[1], g.k1, g.s1, g.out1, oy0, oy1);
            float* dr = dxp + ys * g.ext[2];
            if (oz == oz0 && oy0 > oy1) std::fill(dr, dr + g.ext[2], 0.0f);
            for (int64_t oy = oy0; oy <= oy1; ++oy) {
              const float* sr = spread + oy * pitch + lo2;
              if (oz == oz0 && oy == oy0)
                for (int64_t i = 0; i < g.ext[2]; ++i) dr[i] = 0.0f + sr[i];
              else
                for (int64_t i = 0; i < g.ext[2]; ++i) dr[i] += sr[i];
            }
          }
        }
      }
  }
}

// A row of 16 windows 2 cells wide: its n windows (n >= 16: all 16), and
// the first and second vector of the 2n cells they read.
struct WindowRowMasks {
  __mmask16 windows, cells_lo, cells_hi;
};
H3D_AVX512 inline WindowRowMasks window_row_masks(int64_t n) {
  return {lanes_below(n), lanes_below(2 * n), lanes_below(2 * n - 16)};
}

// 16 windows of one row of 2x2x2 windows: the first maximum in window order
// with the reference's comparison (`v > best`), its window index
// t = 2 * (2a + b) + c and its sign, in AVX-512 (the build's baseline has
// no vectors that take these selects well: the plain loop below ran at a
// fifth of the speed). rows: the window rows' first cells, in (a, b) order.
H3D_AVX512 void argmax_16_windows(const float* const rows[4], int64_t n, float* y, uint8_t* arg) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const WindowRowMasks m = window_row_masks(n);
  __m512 best = _mm512_setzero_ps();
  __m512i at = _mm512_setzero_si512();
  for (int r = 0; r < 4; ++r) {
    const __m512 lo = _mm512_maskz_loadu_ps(m.cells_lo, rows[r]), hi = _mm512_maskz_loadu_ps(m.cells_hi, rows[r] + 16);
    const __m512 v0 = _mm512_permutex2var_ps(lo, even, hi), v1 = _mm512_permutex2var_ps(lo, odd, hi);
    if (r == 0) {
      best = v0;
    } else {
      const __mmask16 hit0 = _mm512_cmp_ps_mask(v0, best, _CMP_GT_OQ);
      best = _mm512_mask_blend_ps(hit0, best, v0);
      at = _mm512_mask_blend_epi32(hit0, at, _mm512_set1_epi32(2 * r));
    }
    const __mmask16 hit1 = _mm512_cmp_ps_mask(v1, best, _CMP_GT_OQ);
    best = _mm512_mask_blend_ps(hit1, best, v1);
    at = _mm512_mask_blend_epi32(hit1, at, _mm512_set1_epi32(2 * r + 1));
  }
  const __mmask16 positive = _mm512_cmp_ps_mask(best, _mm512_setzero_ps(), _CMP_GT_OQ);
  at = _mm512_mask_or_epi32(at, positive, at, _mm512_set1_epi32(Backend::kArgPositive));
  _mm512_mask_storeu_ps(y, m.windows, best);
  _mm512_mask_cvtepi32_storeu_epi8(arg, m.windows, at);
}

// The gradient of 16 windows of one row of 2x2x2 windows from their
// recorded cells: row r (a, b order) of each window gets dy (through the
// ReLU by the recorded sign where slope >= 0) at its recorded cell and 0
// at the other, as max_backward_tiled_2 writes them.
H3D_AVX512 void unpool_16_windows(const uint8_t* arg, const float* dy, int64_t n, float slope, float* const rows[4]) {
  const __m512i lo_idx = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi_idx = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const WindowRowMasks m = window_row_masks(n);
  alignas(16) uint8_t bytes[16] = {};
  std::memcpy(bytes, arg, size_t(std::min<int64_t>(n, 16)));  // a masked byte load needs AVX-512BW
  const __m512i a = _mm512_maskz_cvtepu8_epi32(__mmask16(0xFFFF), _mm_load_si128(reinterpret_cast<const __m128i*>(bytes)));
  const __m512i t = _mm512_and_si512(a, _mm512_set1_epi32(Backend::kNoArg));
  __m512 g = _mm512_maskz_loadu_ps(m.windows, dy);
  if (slope >= 0.0f) {
    const __mmask16 positive = _mm512_test_epi32_mask(a, _mm512_set1_epi32(Backend::kArgPositive));
    g = _mm512_mask_blend_ps(positive, _mm512_mul_ps(g, _mm512_set1_ps(slope)), g);
  }
  for (int r = 0; r < 4; ++r) {
    const __m512 g0 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(t, _mm512_set1_epi32(2 * r)), g);
    const __m512 g1 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(t, _mm512_set1_epi32(2 * r + 1)), g);
    _mm512_mask_storeu_ps(rows[r], m.cells_lo, _mm512_permutex2var_ps(g0, lo_idx, g1));
    _mm512_mask_storeu_ps(rows[r] + 16, m.cells_hi, _mm512_permutex2var_ps(g0, hi_idx, g1));
  }
}

// 2x2x2 windows tiling the input, a row of windows at a time (branch-free):
// the first maximum in window order with the reference's comparison, its
// window index t = 2 * (2a + b) + c and sign.
void max_forward_argmax_tiled_2(const PoolGeom& g, const float* x, float* y, uint8_t* arg, int64_t planes) {
  const int64_t w = g.out2;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t nc = 0; nc < planes; ++nc)
    for (int64_t oz = 0; oz < g.out0; ++oz) {
      const float* xc = x + nc * g.in_vol();
      for (int64_t oy = 0; oy < g.out1; ++oy) {
        const int64_t r0 = g.origin(oz, oy, 0);
        const int64_t rows[4] = {r0, r0 + g.in2, r0 + g.in1 * g.in2, r0 + (g.in1 + 1) * g.in2};
        const int64_t o = nc * g.out_vol() + (oz * g.out1 + oy) * g.out2;
        float* __restrict best = y + o;
        uint8_t* __restrict at = arg + o;
        if (cpu_has_avx512()) {
          for (int64_t ox = 0; ox < w; ox += 16) {
            const float* r16[4] = {xc + rows[0] + 2 * ox, xc + rows[1] + 2 * ox, xc + rows[2] + 2 * ox,
                                   xc + rows[3] + 2 * ox};
            argmax_16_windows(r16, w - ox, best + ox, at + ox);
          }
          continue;
        }
        for (int r = 0; r < 4; ++r) {
          const float* __restrict xr = xc + rows[r];
          for (int64_t ox = 0; ox < w; ++ox) {
            const float v0 = xr[2 * ox], v1 = xr[2 * ox + 1];
            float m = r == 0 ? v0 : best[ox];
            uint8_t t = r == 0 ? 0 : at[ox];
            const bool hit0 = r > 0 && v0 > m;
            m = hit0 ? v0 : m;
            t = hit0 ? uint8_t(2 * r) : t;
            const bool hit1 = v1 > m;
            best[ox] = hit1 ? v1 : m;
            at[ox] = hit1 ? uint8_t(2 * r + 1) : t;
          }
        }
        for (int64_t ox = 0; ox < w; ++ox) at[ox] |= best[ox] > 0.0f ? Backend::kArgPositive : uint8_t(0);
      }
    }
}

// Windows tiling the input: every cell written, the recorded one with the
// gradient (through the ReLU by the recorded sign), the others with 0, as
// max_backward_tiled and max_backward_tiled_2 write them.
void max_backward_argmax_tiled(const PoolGeom& g, const uint8_t* arg, const float* dy, float* dx, int64_t planes,
                               float slope) {
  const bool two = g.k0 == 2 && g.k1 == 2 && g.k2 == 2 && cpu_has_avx512();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t nc = 0; nc < planes; ++nc)
    for (int64_t oz = 0; oz < g.out0; ++oz) {
      float* dxc = dx + nc * g.in_vol();
      for (int64_t oy = 0; oy < g.out1; ++oy) {
        const int64_t o = nc * g.out_vol() + (oz * g.out1 + oy) * g.out2;
        if (two) {
          const int64_t r0 = g.origin(oz, oy, 0);
          for (int64_t ox = 0; ox < g.out2; ox += 16) {
            float* r16[4] = {dxc + r0 + 2 * ox, dxc + r0 + g.in2 + 2 * ox, dxc + r0 + g.in1 * g.in2 + 2 * ox,
                             dxc + r0 + (g.in1 + 1) * g.in2 + 2 * ox};
            unpool_16_windows(arg + o + ox, dy + o + ox, g.out2 - ox, slope, r16);
          }
          continue;
        }
        for (int a = 0; a < g.k0; ++a)
          for (int b = 0; b < g.k1; ++b) {
            float* __restrict dr = dxc + g.origin(oz, oy, 0) + (a * g.in1 + b) * g.in2;
            const int first = (a * g.k1 + b) * g.k2;
            for (int64_t ox = 0; ox < g.out2; ++ox) {
              const uint8_t t = arg[o + ox];
              const float gy = slope < 0.0f || (t & Backend::kArgPositive) ? dy[o + ox] : slope * dy[o + ox];
              for (int c = 0; c < g.k2; ++c) dr[ox * g.k2 + c] = (t & Backend::kNoArg) == first + c ? gy : 0.0f;
            }
          }
      }
    }
}

}  // namespace

void CpuBackend::pool3d_forward(const PoolDesc& d, const float* x, float* y) {
  if (!unpadded(d) && d.kind == PoolKind::kMax) return ref_.pool3d_forward(d, x, y);
  const PoolGeom g = pool_geom(d);
  if (d.kind == PoolKind::kMax)
    forward_rows<true, 0, 0>(g, x, y, d.n * d.c);
  else if (g.k2 == 3 && g.s2 == 2)
    forward_rows<false, 3, 2>(g, x, y, d.n * d.c);
  else
    forward_rows<false, 0, 0>(g, x, y, d.n * d.c);
}

void CpuBackend::pool3d_backward(const PoolDesc& d, const float* x, const float* dy, float* dx) {
  if (!unpadded(d) && d.kind == PoolKind::kMax) return ref_.pool3d_backward(d, x, dy, dx);
  const PoolGeom g = pool_geom(d);
  if (d.kind == PoolKind::kAvg && g.k2 == 3 && g.s2 == 2)
    avg_backward_gather<3, 2>(g, dy, dx, d.n * d.c);
  else if (d.kind == PoolKind::kAvg)
    avg_backward_gather<0, 0>(g, dy, dx, d.n * d.c);
  else if (g.tiles() && g.k0 == 2 && g.k1 == 2 && g.k2 == 2)
    max_backward_tiled_2(g, x, dy, dx, d.n * d.c, d.relu_grad_slope);
  else if (g.tiles())
    max_backward_tiled(g, x, dy, dx, d.n * d.c, d.relu_grad_slope);
  else
    max_backward_scatter(g, x, dy, dx, d.n * d.c, d.relu_grad_slope);
}


void CpuBackend::pool3d_forward_argmax(const PoolDesc& d, const float* x, float* y, uint8_t* arg) {
  const PoolGeom g = pool_geom(d);
  if (d.kind == PoolKind::kMax && unpadded(d) && g.tiles() && g.k0 == 2 && g.k1 == 2 && g.k2 == 2)
    return max_forward_argmax_tiled_2(g, x, y, arg, d.n * d.c);
  ref_.pool3d_forward_argmax(d, x, y, arg);
}

void CpuBackend::pool3d_backward_argmax(const PoolDesc& d, const uint8_t* arg, const float* dy, float* dx) {
  const PoolGeom g = pool_geom(d);
  if (d.kind == PoolKind::kMax && unpadded(d) && g.tiles())
    return max_backward_argmax_tiled(g, arg, dy, dx, d.n * d.c, d.relu_grad_slope);
  ref_.pool3d_backward_argmax(d, arg, dy, dx);
}

}  // namespace h3d
