#include "hybrid3d/dist/box_copy.hpp"

#include <cstring>

namespace h3d {

namespace {

// Calls f(src_offset, dst_offset, run_length) for every contiguous W-run of
// `region` inside two NCDHW tensors with the given origins.
template <typename F>
void for_each_run(int64_t N, int64_t C, const Box& a_org, const Box& b_org, const Box& region, F f) {
  auto ae = a_org.extents(), be = b_org.extents();
  int64_t run = region.r[2].size();
  if (region.empty() || N == 0 || C == 0) return;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t z = region.r[0].lo; z < region.r[0].hi; ++z)
        for (int64_t y = region.r[1].lo; y < region.r[1].hi; ++y) {
          int64_t a = (((n * C + c) * ae[0] + (z - a_org.r[0].lo)) * ae[1] + (y - a_org.r[1].lo)) * ae[2] +
                      (region.r[2].lo - a_org.r[2].lo);
          int64_t b = (((n * C + c) * be[0] + (z - b_org.r[0].lo)) * be[1] + (y - b_org.r[1].lo)) * be[2] +
                      (region.r[2].lo - b_org.r[2].lo);
          f(a, b, run);
        }
}

}  // namespace

void copy_box(const Tensor& src, const Box& src_origin, Tensor& dst, const Box& dst_origin, const Box& region,
              CopyMode mode) {
  const float* s = src.data();
  float* d = dst.data();
  for_each_run(src.dim(0), src.dim(1), src_origin, dst_origin, region, [&](int64_t a, int64_t b, int64_t n) {
    if (mode == CopyMode::kAssign) {
      std::memcpy(d + b, s + a, static_cast<size_t>(n) * sizeof(float));
    } else {
      for (int64_t i = 0; i < n; ++i) d[b + i] += s[a + i];
    }
  });
}

void pack_box(const Tensor& src, const Box& src_origin, const Box& region, float* buf) {
  const float* s = src.data();
  int64_t pos = 0;
  Box dense = region;  // the buffer's own origin is the region itself
  for_each_run(src.dim(0), src.dim(1), src_origin, dense, region, [&](int64_t a, int64_t, int64_t n) {
    std::memcpy(buf + pos, s + a, static_cast<size_t>(n) * sizeof(float));
    pos += n;
  });
}

void unpack_box(const float* buf, const Box& region, Tensor& dst, const Box& dst_origin, CopyMode mode) {
  float* d = dst.data();
  int64_t pos = 0;
  for_each_run(dst.dim(0), dst.dim(1), region, dst_origin, region, [&](int64_t, int64_t b, int64_t n) {
    if (mode == CopyMode::kAssign) {
      std::memcpy(d + b, buf + pos, static_cast<size_t>(n) * sizeof(float));
    } else {
      for (int64_t i = 0; i < n; ++i) d[b + i] += buf[pos + i];
    }
    pos += n;
  });
}

}  // namespace h3d
