// CPU pooling: the reference semantics (window order, first maximum,
// average over the whole window including padding cells) in loops shaped
// for the memory system. The layers always pass an already padded input
// (PoolDesc padding 0); anything else goes to the reference.
//
// Forward is separable: for each output row, the k0 x k1 input rows of its
// windows are reduced element by element (contiguous, vectorised) into a
// row buffer, and the buffer is then reduced along W. Average backward is
// the same in reverse, computed per input plane (a gather, so planes are
// independent and every dx value is written once). Max backward finds the
// first maximum of each window in window order; when the windows tile the
// input (kernel = stride, as in cosmoflow) each window writes all of its
// cells, so dx needs no separate zeroing pass.
#include <algorithm>
#include <limits>
#include <vector>

#include "hybrid3d/backend/cpu/cpu_backend.hpp"

namespace h3d {

namespace {

struct PoolGeom {
  int64_t in0, in1, in2, out0, out1, out2;
  int k0, k1, k2, s0, s1, s2;
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
  return {d.in[0], d.in[1], d.in[2], d.out[0], d.out[1], d.out[2], d.k[0], d.k[1], d.k[2],
          d.stride[0], d.stride[1], d.stride[2]};
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

template <bool kMax>
void forward_rows(const PoolGeom& g, const float* x, float* y, int64_t planes) {
  const float inv = 1.0f / float(g.k0 * g.k1 * g.k2);
#pragma omp parallel
  {
    std::vector<float> row(size_t(g.in2));
#pragma omp for collapse(2) schedule(static)
    for (int64_t nc = 0; nc < planes; ++nc)
      for (int64_t oz = 0; oz < g.out0; ++oz) {
        const float* xc = x + nc * g.in_vol();
        float* yp = y + nc * g.out_vol() + oz * g.out1 * g.out2;
        for (int64_t oy = 0; oy < g.out1; ++oy) {
          float* r = row.data();
          const float* first = xc + g.origin(oz, oy, 0);
          std::copy(first, first + g.in2, r);
          for (int a = 0; a < g.k0; ++a)
            for (int b = (a == 0 ? 1 : 0); b < g.k1; ++b) {
              const float* src = first + (a * g.in1 + b) * g.in2;
              for (int64_t i = 0; i < g.in2; ++i) r[i] = kMax ? std::max(r[i], src[i]) : r[i] + src[i];
            }
          float* yr = yp + oy * g.out2;
          for (int64_t ox = 0; ox < g.out2; ++ox) {
            const float* w = r + ox * g.s2;
            float acc = w[0];
            for (int c = 1; c < g.k2; ++c) acc = kMax ? std::max(acc, w[c]) : acc + w[c];
            yr[ox] = kMax ? acc : acc * inv;
          }
        }
      }
  }
}

// K > 0: the kernel (and stride) is K in every dimension, known at compile
// time so that the window loops unroll; K = 0: read from g.
template <int K>
void max_backward_tiled(const PoolGeom& g, const float* x, const float* dy, float* dx, int64_t planes) {
  const int k0 = K ? K : g.k0, k1 = K ? K : g.k1, k2 = K ? K : g.k2;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t nc = 0; nc < planes; ++nc)
    for (int64_t oz = 0; oz < g.out0; ++oz) {
      const float* xc = x + nc * g.in_vol();
      float* dxc = dx + nc * g.in_vol();
      const float* dyp = dy + nc * g.out_vol() + oz * g.out1 * g.out2;
      for (int64_t oy = 0; oy < g.out1; ++oy)
        for (int64_t ox = 0; ox < g.out2; ++ox) {
          const int64_t base = g.origin(oz, oy, ox);
          int64_t arg = base;
          float best = xc[base];
          for (int a = 0; a < k0; ++a)
            for (int b = 0; b < k1; ++b)
              for (int c = 0; c < k2; ++c) {
                const int64_t i = base + (a * g.in1 + b) * g.in2 + c;
                if (xc[i] > best) {
                  best = xc[i];
                  arg = i;
                }
              }
          const float gy = dyp[oy * g.out2 + ox];
          for (int a = 0; a < k0; ++a)
            for (int b = 0; b < k1; ++b)
              for (int c = 0; c < k2; ++c) {
                const int64_t i = base + (a * g.in1 + b) * g.in2 + c;
                dxc[i] = i == arg ? gy : 0.0f;
              }
        }
    }
}

void max_backward_scatter(const PoolGeom& g, const float* x, const float* dy, float* dx, int64_t planes) {
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
  }
}

// K, S > 0: the W kernel and stride at compile time (the loops unroll).
template <int K, int S>
void avg_backward_gather(const PoolGeom& g, const float* dy, float* dx, int64_t planes) {
  const int k2 = K ? K : g.k2, s2 = S ? S : g.s2;
  const float inv = 1.0f / float(g.k0 * g.k1 * g.k2);
#pragma omp parallel
  {
    // W-spread rows of one dy plane: spread[oy][x] = sum over ox covering x.
    std::vector<float> spread(size_t(g.out1 * g.in2));
#pragma omp for collapse(2) schedule(static)
    for (int64_t nc = 0; nc < planes; ++nc)
      for (int64_t z = 0; z < g.in0; ++z) {
        float* dxp = dx + nc * g.in_vol() + z * g.in1 * g.in2;
        std::fill(dxp, dxp + g.in1 * g.in2, 0.0f);
        int64_t oz0, oz1;
        covering(z, g.k0, g.s0, g.out0, oz0, oz1);
        for (int64_t oz = oz0; oz <= oz1; ++oz) {
          const float* dyp = dy + nc * g.out_vol() + oz * g.out1 * g.out2;
          std::fill(spread.begin(), spread.end(), 0.0f);
          for (int64_t oy = 0; oy < g.out1; ++oy) {
            float* sr = spread.data() + oy * g.in2;
            for (int64_t ox = 0; ox < g.out2; ++ox) {
              const float v = dyp[oy * g.out2 + ox] * inv;
              for (int c = 0; c < k2; ++c) sr[ox * s2 + c] += v;
            }
          }
          for (int64_t yy = 0; yy < g.in1; ++yy) {
            int64_t oy0, oy1;
            covering(yy, g.k1, g.s1, g.out1, oy0, oy1);
            float* dr = dxp + yy * g.in2;
            for (int64_t oy = oy0; oy <= oy1; ++oy) {
              const float* sr = spread.data() + oy * g.in2;
              for (int64_t i = 0; i < g.in2; ++i) dr[i] += sr[i];
            }
          }
        }
      }
  }
}

}  // namespace

void CpuBackend::pool3d_forward(const PoolDesc& d, const float* x, float* y) {
  if (!unpadded(d)) return ref_.pool3d_forward(d, x, y);
  const PoolGeom g = pool_geom(d);
  if (d.kind == PoolKind::kMax)
    forward_rows<true>(g, x, y, d.n * d.c);
  else
    forward_rows<false>(g, x, y, d.n * d.c);
}

void CpuBackend::pool3d_backward(const PoolDesc& d, const float* x, const float* dy, float* dx) {
  if (!unpadded(d)) return ref_.pool3d_backward(d, x, dy, dx);
  const PoolGeom g = pool_geom(d);
  if (d.kind == PoolKind::kAvg && g.k2 == 3 && g.s2 == 2)
    avg_backward_gather<3, 2>(g, dy, dx, d.n * d.c);
  else if (d.kind == PoolKind::kAvg)
    avg_backward_gather<0, 0>(g, dy, dx, d.n * d.c);
  else if (g.tiles() && g.k0 == 2 && g.k1 == 2 && g.k2 == 2)
    max_backward_tiled<2>(g, x, dy, dx, d.n * d.c);
  else if (g.tiles())
    max_backward_tiled<0>(g, x, dy, dx, d.n * d.c);
  else
    max_backward_scatter(g, x, dy, dx, d.n * d.c);
}

}  // namespace h3d
