#include "test_util.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "hybrid3d/core/rng.hpp"
#include "hybrid3d/core/box_kernels.hpp"

namespace h3d::test {

Tensor global_random(uint64_t seed, int64_t n, int64_t c, const Box& box, std::array<int64_t, 3> e, int64_t s0) {
  auto b = box.extents();
  Tensor t({n, c, b[0], b[1], b[2]});
  int64_t k = 0;
  for (int64_t s = 0; s < n; ++s)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t z = box.r[0].lo; z < box.r[0].hi; ++z)
        for (int64_t y = box.r[1].lo; y < box.r[1].hi; ++y)
          for (int64_t x = box.r[2].lo; x < box.r[2].hi; ++x) {
            uint64_t g = uint64_t((((s0 + s) * c + ch) * e[0] + z) * e[1] + y) * uint64_t(e[2]) + uint64_t(x);
            t[k++] = float(2.0 * uniform01(seed, 77, g) - 1.0);
          }
  return t;
}

Tensor block_of(const Tensor& whole, const Box& box, int64_t s0, int64_t n) {
  Box all{{Range{0, whole.dim(2)}, Range{0, whole.dim(3)}, Range{0, whole.dim(4)}}};
  int64_t per = whole.numel() / whole.dim(0);
  Tensor part({n, whole.dim(1), whole.dim(2), whole.dim(3), whole.dim(4)});
  std::copy(whole.data() + s0 * per, whole.data() + (s0 + n) * per, part.data());
  auto e = box.extents();
  Tensor out({n, whole.dim(1), e[0], e[1], e[2]});
  host_box_kernels().copy_box(part.data(), all, out.data(), box, box, n * whole.dim(1), CopyMode::kAssign);
  return out;
}

double rel_diff(const Tensor& a, const Tensor& b, double floor) {
  if (a.shape() != b.shape()) throw std::runtime_error("shape mismatch " + a.shape_str() + " vs " + b.shape_str());
  double m = 0, d = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    m = std::max(m, double(std::abs(b[i])));
    d = std::max(d, double(std::abs(a[i] - b[i])));
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
  }
  return d / std::max(m, floor);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), size_t(a.numel()) * sizeof(float)) == 0;
}

}  // namespace h3d::test
