// CPU pooling: the reference semantics (window order, first maximum,
// average over the whole window including padding cells) in flat loops
// threaded over channels, without the reference's per-tap bounds checks:
// the layers always pass an already padded input (PoolDesc padding 0).
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

}  // namespace

void CpuBackend::pool3d_forward(const PoolDesc& d, const float* x, float* y) {
  if (!unpadded(d)) return RefBackend::pool3d_forward(d, x, y);
  const PoolGeom g = pool_geom(d);
  const float inv = 1.0f / float(g.k0 * g.k1 * g.k2);
  const bool is_max = d.kind == PoolKind::kMax;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t nc = 0; nc < d.n * d.c; ++nc)
    for (int64_t oz = 0; oz < g.out0; ++oz) {
      const float* xc = x + nc * g.in_vol();
      float* yc = y + nc * g.out_vol() + oz * g.out1 * g.out2;
      for (int64_t oy = 0; oy < g.out1; ++oy)
        for (int64_t ox = 0; ox < g.out2; ++ox) {
          const int64_t base = g.origin(oz, oy, ox);
          float acc = is_max ? -std::numeric_limits<float>::infinity() : 0.0f;
          for (int a = 0; a < g.k0; ++a)
            for (int b = 0; b < g.k1; ++b) {
              const float* r = xc + base + (a * g.in1 + b) * g.in2;
              for (int c = 0; c < g.k2; ++c) acc = is_max ? std::max(acc, r[c]) : acc + r[c];
            }
          yc[oy * g.out2 + ox] = is_max ? acc : acc * inv;
        }
    }
}

void CpuBackend::pool3d_backward(const PoolDesc& d, const float* x, const float* dy, float* dx) {
  if (!unpadded(d)) return RefBackend::pool3d_backward(d, x, dy, dx);
  const PoolGeom g = pool_geom(d);
  const float inv = 1.0f / float(g.k0 * g.k1 * g.k2);
  const bool is_max = d.kind == PoolKind::kMax;
  // Windows overlap only within a channel: channels are independent.
#pragma omp parallel for schedule(static)
  for (int64_t nc = 0; nc < d.n * d.c; ++nc) {
    float* dxc = dx + nc * g.in_vol();
    const float* dyc = dy + nc * g.out_vol();
    const float* xc = is_max ? x + nc * g.in_vol() : nullptr;
    std::fill(dxc, dxc + g.in_vol(), 0.0f);
    for (int64_t oz = 0; oz < g.out0; ++oz)
      for (int64_t oy = 0; oy < g.out1; ++oy)
        for (int64_t ox = 0; ox < g.out2; ++ox) {
          const int64_t base = g.origin(oz, oy, ox);
          const float gy = dyc[(oz * g.out1 + oy) * g.out2 + ox];
          if (is_max) {
            dxc[first_max(g, xc, base)] += gy;
            continue;
          }
          const float share = gy * inv;
          for (int a = 0; a < g.k0; ++a)
            for (int b = 0; b < g.k1; ++b) {
              float* r = dxc + base + (a * g.in1 + b) * g.in2;
              for (int c = 0; c < g.k2; ++c) r[c] += share;
            }
        }
  }
}

}  // namespace h3d
