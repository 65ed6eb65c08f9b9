#include "hybrid3d/core/box_kernels.hpp"

#include <algorithm>
#include <cstring>

#include "hybrid3d/core/error.hpp"

namespace h3d {

namespace {

// Calls f(src_offset, dst_offset, run_length) for every contiguous W-run of
// `region` inside two [nc, box] buffers with the given origins.
template <typename F>
void for_each_run(int64_t nc, const Box& a_org, const Box& b_org, const Box& region, F f) {
  auto ae = a_org.extents(), be = b_org.extents();
  int64_t run = region.r[2].size();
  if (region.empty() || nc == 0) return;
  for (int64_t q = 0; q < nc; ++q)
    for (int64_t z = region.r[0].lo; z < region.r[0].hi; ++z)
      for (int64_t y = region.r[1].lo; y < region.r[1].hi; ++y) {
        int64_t a = ((q * ae[0] + (z - a_org.r[0].lo)) * ae[1] + (y - a_org.r[1].lo)) * ae[2] +
                    (region.r[2].lo - a_org.r[2].lo);
        int64_t b = ((q * be[0] + (z - b_org.r[0].lo)) * be[1] + (y - b_org.r[1].lo)) * be[2] +
                    (region.r[2].lo - b_org.r[2].lo);
        f(a, b, run);
      }
}

int64_t offset_of(const Box& org, int64_t c, int64_t z, int64_t y, int64_t x) {
  auto e = org.extents();
  return ((c * e[0] + (z - org.r[0].lo)) * e[1] + (y - org.r[1].lo)) * e[2] + (x - org.r[2].lo);
}

class HostBoxKernels : public BoxKernels {
 public:
  void copy_box(const float* s, const Box& src_origin, float* d, const Box& dst_origin, const Box& region, int64_t nc,
                CopyMode mode) override {
    for_each_run(nc, src_origin, dst_origin, region, [&](int64_t a, int64_t b, int64_t n) {
      if (mode == CopyMode::kAssign) {
        std::memcpy(d + b, s + a, static_cast<size_t>(n) * sizeof(float));
      } else {
        for (int64_t i = 0; i < n; ++i) d[b + i] += s[a + i];
      }
    });
  }
  void relayout_in_place(float* t, int64_t nc, const Box& from, const Box& to, const Box& region) override;
  void fill_outside(float* t, int64_t nc, const Box& origin, const Box& inner, float v) override;
};

}  // namespace

BoxKernels& host_box_kernels() {
  static HostBoxKernels k;
  return k;
}

void HostBoxKernels::relayout_in_place(float* t, int64_t nc, const Box& from, const Box& to, const Box& region) {
  if (region.empty() || nc == 0) return;
  H3D_CHECK(from.contains(region) && to.contains(region), "relayout_in_place: region outside the layouts");
  const bool grow = to.contains(from);
  H3D_CHECK(grow || from.contains(to), "relayout_in_place: one layout must contain the other");
  // Growing, every run moves up (to a higher or equal offset): walk backwards
  // so that no run overwrites one not yet moved; shrinking, walk forwards.
  const int64_t rows = region.r[0].size() * region.r[1].size(), run = region.r[2].size();
  const int64_t total = nc * rows;
  for (int64_t k = 0; k < total; ++k) {
    int64_t i = grow ? total - 1 - k : k;
    int64_t c = i / rows, zy = i % rows;
    int64_t z = region.r[0].lo + zy / region.r[1].size(), y = region.r[1].lo + zy % region.r[1].size();
    int64_t src = offset_of(from, c, z, y, region.r[2].lo), dst = offset_of(to, c, z, y, region.r[2].lo);
    if (src != dst) std::memmove(t + dst, t + src, size_t(run) * sizeof(float));
  }
}

void HostBoxKernels::fill_outside(float* t, int64_t nc, const Box& origin, const Box& inner, float v) {
  Box in = inner.intersect(origin);
  auto e = origin.extents();
  int64_t x_lo = in.r[2].lo - origin.r[2].lo, x_hi = in.r[2].hi - origin.r[2].lo;
  for (int64_t c = 0; c < nc; ++c)
    for (int64_t z = origin.r[0].lo; z < origin.r[0].hi; ++z)
      for (int64_t y = origin.r[1].lo; y < origin.r[1].hi; ++y) {
        float* row = t + offset_of(origin, c, z, y, origin.r[2].lo);
        bool inside = !in.empty() && z >= in.r[0].lo && z < in.r[0].hi && y >= in.r[1].lo && y < in.r[1].hi;
        if (!inside) {
          std::fill(row, row + e[2], v);
        } else {
          std::fill(row, row + x_lo, v);
          std::fill(row + x_hi, row + e[2], v);
        }
      }
}

}  // namespace h3d
