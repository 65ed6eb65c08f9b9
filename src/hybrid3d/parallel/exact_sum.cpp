#include "hybrid3d/parallel/exact_sum.hpp"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <limits>

#include "hybrid3d/core/error.hpp"

namespace h3d {

namespace {

// |scaled| stays below 2^126, so that the sum of two partial sums (each
// within the bound) never leaves the int128 range.
constexpr int kGridBits = 125;
const double kLimit = std::ldexp(1.0, kGridBits + 1);

}  // namespace

void ExactSum::reset(int64_t n, double bound) {
  acc_.assign(static_cast<size_t>(n), 0);
  parts_.clear();
  pending_ = 0;
  nonfinite_ = !std::isfinite(bound);
  int g = 0;
  if (!nonfinite_ && bound > 0) g = std::ilogb(bound) + 1 - kGridBits;
  scale_ = std::ldexp(1.0, -g);
  unscale_ = std::ldexp(1.0, g);
}

__int128 ExactSum::to_grid(double v) const {
  if (nonfinite_) return 0;
  const double q = std::nearbyint(v * scale_);
  // Beyond the bound: the caller's bound was wrong (or v is not finite,
  // which a finite bound taken from the same data excludes).
  H3D_CHECK(std::fabs(q) < kLimit, "ExactSum: term " << v << " exceeds the bound of its sum");
  // |q| = hi 2^64 + lo exactly (both parts are bits of |q|): two hardware
  // conversions instead of the library's double -> int128 one.
  const double a = std::fabs(q), hi = std::floor(a * 0x1p-64), lo = a - hi * 0x1p64;
  const __int128 r = (static_cast<__int128>(static_cast<uint64_t>(hi)) << 64) + static_cast<uint64_t>(lo);
  return q < 0 ? -r : r;
}

// p_k[i] += the part of v[i] on grid 2^(g + 80), 2^(g + 40), 2^g (scales
// s_k = 2^-(grid), u0, u1 = 2^(grid) of the first two). Returns whether a
// term lay beyond the bound. round(x) = (x + 1.5 2^52) - 1.5 2^52 for
// |x| < 2^51 (round to nearest, as to_grid; the build neither reassociates
// nor changes the rounding mode, and a contracted multiply-add is exact
// here as the products are). Each remainder is exact: it is made of the
// bits of v[i] below the part taken. Cloned for AVX-512 and AVX2, picked
// at load time, as the build targets the baseline x86-64 (one clone set
// per element type: clang clones no templates).
template <typename T>
__attribute__((always_inline)) inline bool split_add_body(const T* v, size_t n, double* p0, double* p1, double* p2,
                                                          double s0, double s1, double s2, double u0, double u1,
                                                          double limit) {
  const double magic = 0x1.8p52;
  int bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = double(v[i]);
    bad |= std::fabs(x) * s2 >= limit;
    const double q0 = (x * s0 + magic) - magic;
    const double r0 = x - q0 * u0;
    const double q1 = (r0 * s1 + magic) - magic;
    const double r1 = r0 - q1 * u1;
    const double q2 = (r1 * s2 + magic) - magic;
    p0[i] += q0;
    p1[i] += q1;
    p2[i] += q2;
  }
  return bad != 0;
}

#define H3D_SPLIT_ADD(T)                                                                                       \
  __attribute__((target_clones("avx512f", "avx2", "default"))) bool split_add(                                  \
      const T* v, size_t n, double* p0, double* p1, double* p2, double s0, double s1, double s2, double u0,     \
      double u1, double limit) {                                                                               \
    return split_add_body(v, n, p0, p1, p2, s0, s1, s2, u0, u1, limit);                                        \
  }
H3D_SPLIT_ADD(float)
H3D_SPLIT_ADD(double)
#undef H3D_SPLIT_ADD

template <typename T>
void ExactSum::add_all_split(const T* v) {
  if (nonfinite_ || acc_.empty()) return;
  const size_t n = acc_.size();
  if (parts_.empty()) parts_.assign(3 * n, 0.0);
  double* p0 = parts_.data();
  const bool beyond = split_add(v, n, p0, p0 + n, p0 + 2 * n, scale_ * 0x1p-80, scale_ * 0x1p-40, scale_,
                                unscale_ * 0x1p80, unscale_ * 0x1p40, kLimit);
  // Within the bound |part 0| < 2^46: 64 arrays stay below 2^52.
  H3D_CHECK(!beyond, "ExactSum: a term exceeds the bound of its sum");
  if (++pending_ == 64) flush();
}

template void ExactSum::add_all_split<float>(const float*);
template void ExactSum::add_all_split<double>(const double*);

void ExactSum::flush() {
  if (pending_ == 0) return;
  const size_t n = acc_.size();
  for (size_t i = 0; i < n; ++i) {
    const __int128 q0 = static_cast<int64_t>(parts_[i]), q1 = static_cast<int64_t>(parts_[n + i]),
                   q2 = static_cast<int64_t>(parts_[2 * n + i]);
    acc_[i] += q0 * (static_cast<__int128>(1) << 80) + q1 * (static_cast<__int128>(1) << 40) + q2;
  }
  std::fill(parts_.begin(), parts_.end(), 0.0);
  pending_ = 0;
}

void ExactSum::allreduce(const Comm& comm) {
  flush();
  if (comm.size() == 1 || acc_.empty()) return;
  comm.allreduce_sum_int128(acc_.data(), size());
}

double ExactSum::value(int64_t i) const {
  H3D_CHECK(pending_ == 0, "ExactSum::value before allreduce or flush of its split parts");
  if (nonfinite_) return std::numeric_limits<double>::quiet_NaN();
  // Two hardware conversions instead of the library's int128 -> double
  // (within an ulp of it; a function of the integer alone, as all it needs).
  const __int128 a = acc_[static_cast<size_t>(i)];
  const double hi = static_cast<double>(static_cast<int64_t>(a >> 64)) * 0x1p64;
  const double lo = static_cast<double>(static_cast<uint64_t>(a));
  return (hi + lo) * unscale_;
}

void ExactSum::values(float* out) const {
  H3D_CHECK(pending_ == 0, "ExactSum::values before allreduce or flush of its split parts");
  for (int64_t i = 0; i < size(); ++i) out[i] = static_cast<float>(value(i));
}

double global_max_abs(const Comm& comm, const float* v, int64_t n) {
  double m = 0;
  int bad = 0;
#pragma omp parallel for reduction(max : m) reduction(| : bad) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const double a = std::fabs(double(v[i]));
    bad |= std::isnan(a);
    m = a > m ? a : m;
  }
  // NaN is not ordered for MPI_MAX: it travels as +inf.
  return comm.allreduce_max(bad ? std::numeric_limits<double>::infinity() : m);
}

}  // namespace h3d
