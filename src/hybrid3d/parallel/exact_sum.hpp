// ExactSum: sums whose result does not depend on how the terms are split
// over ranks, threads or blocks, or on the order they are added in
// (--deterministic).
//
// Every term is rounded once to a fixed grid, a multiple of 2^g, and the
// multiples are added as 128-bit integers: integer addition is exact and
// associative, so any partition of the terms and any reduction tree give
// the same bits. The grid comes from `bound`, an upper bound on the
// magnitude of every sum of terms, which must be the same on every rank
// (callers take it from global maxima): g puts the bound just under 2^126,
// so a term keeps about 125 - log2(bound / |term|) bits.
//
// Rounding a term to the grid is the one approximation, and it is a function
// of the term alone. A layer that wants layout-independent results forms
// its partial sums on pieces that are the same under every layout (fixed
// global tiles, single samples) and adds those partials here.
#pragma once
#include <cstdint>
#include <vector>

#include "hybrid3d/parallel/comm.hpp"

namespace h3d {

class ExactSum {
 public:
  ExactSum() = default;
  ExactSum(int64_t n, double bound) { reset(n, bound); }
  // n sums, all zero. A non-finite bound makes every value NaN (a NaN or
  // infinite input propagates as it would through a float sum).
  void reset(int64_t n, double bound);
  int64_t size() const { return static_cast<int64_t>(acc_.size()); }

  void add(int64_t i, double v) { acc_[static_cast<size_t>(i)] += to_grid(v); }
  // acc[i] += v[i] for i in [0, size()). Whole arrays are first split into
  // three integer-valued doubles each (grids 2^(g+80), 2^(g+40), 2^g), which
  // add exactly and vectorise, and reach the int128 sums every 64 arrays.
  void add_all(const float* v) { add_all_split(v); }
  void add_all(const double* v) { add_all_split(v); }

  // Sums over every rank of comm (collective; the same bound on all).
  // It flushes the split parts; read values after it (or after flush()).
  void allreduce(const Comm& comm);
  void flush();  // the split parts into the int128 sums
  double value(int64_t i) const;
  void values(float* out) const;

 private:
  __int128 to_grid(double v) const;
  template <typename T>
  void add_all_split(const T* v);
  std::vector<__int128> acc_;
  std::vector<double> parts_;  // [3][n] integer-valued doubles, < 2^52 each
  int pending_ = 0;            // arrays added to parts_ since the last flush
  double scale_ = 1.0, unscale_ = 1.0;  // 2^-g and 2^g
  bool nonfinite_ = false;
};

// max |v| over every rank of comm (collective).
double global_max_abs(const Comm& comm, const float* v, int64_t n);

}  // namespace h3d
