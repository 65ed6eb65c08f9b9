#include "hybrid3d/dist/exact_sum.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "hybrid3d/core/error.hpp"

namespace h3d {

namespace {

// |scaled| stays below 2^126, so that the sum of two partial sums (each
// within the bound) never leaves the int128 range.
constexpr int kGridBits = 125;
const double kLimit = std::ldexp(1.0, kGridBits + 1);

void add_int128(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const unsigned char*>(in);
  auto* b = static_cast<unsigned char*>(inout);
  for (int i = 0; i < *len; ++i) {
    __int128 x, y;
    std::memcpy(&x, a + 16 * i, 16);  // MPI's buffers need not be 16-aligned
    std::memcpy(&y, b + 16 * i, 16);
    y += x;
    std::memcpy(b + 16 * i, &y, 16);
  }
}

struct Int128Mpi {
  MPI_Datatype type;
  MPI_Op op;
  Int128Mpi() {
    H3D_MPI(MPI_Type_contiguous(2, MPI_INT64_T, &type));
    H3D_MPI(MPI_Type_commit(&type));
    H3D_MPI(MPI_Op_create(&add_int128, /*commute=*/1, &op));
  }
};

const Int128Mpi& int128_mpi() {
  static const Int128Mpi m;  // created after MPI_Init, on first use
  return m;
}

}  // namespace

void ExactSum::reset(int64_t n, double bound) {
  acc_.assign(static_cast<size_t>(n), 0);
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
  return static_cast<__int128>(q);
}

void ExactSum::add_all(const float* v) {
  for (size_t i = 0; i < acc_.size(); ++i) acc_[i] += to_grid(double(v[i]));
}

void ExactSum::add_all(const double* v) {
  for (size_t i = 0; i < acc_.size(); ++i) acc_[i] += to_grid(v[i]);
}

void ExactSum::allreduce(const Comm& comm) {
  if (comm.size() == 1 || acc_.empty()) return;
  const auto& m = int128_mpi();
  const int64_t chunk = std::numeric_limits<int>::max() / 32;
  for (int64_t off = 0; off < size(); off += chunk) {
    const int cnt = static_cast<int>(std::min(chunk, size() - off));
    H3D_MPI(MPI_Allreduce(MPI_IN_PLACE, acc_.data() + off, cnt, m.type, m.op, comm.raw()));
  }
}

double ExactSum::value(int64_t i) const {
  if (nonfinite_) return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(acc_[static_cast<size_t>(i)]) * unscale_;
}

void ExactSum::values(float* out) const {
  for (int64_t i = 0; i < size(); ++i) out[i] = static_cast<float>(value(i));
}

double global_max_abs(const Comm& comm, const float* v, int64_t n) {
  double m = 0;
  bool bad = false;
  for (int64_t i = 0; i < n; ++i) {
    const double a = std::fabs(double(v[i]));
    if (!(a <= m)) {
      if (std::isnan(a)) bad = true;
      else m = a;
    }
  }
  // NaN is not ordered for MPI_MAX: it travels as +inf.
  return comm.allreduce_max(bad ? std::numeric_limits<double>::infinity() : m);
}

}  // namespace h3d
