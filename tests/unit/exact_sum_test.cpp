// ExactSum: the same bits whatever the order and grouping of the terms, the
// sum to within the grid of the bound, and the split path (add_all) equal
// to the one-term path (add).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/parallel/exact_sum.hpp"

namespace h3d {
namespace {

// Terms over 60 binary orders of magnitude, both signs, with cancellation.
std::vector<float> wide_terms(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-40, 20);
  std::vector<float> v(n);
  for (auto& x : v) x = std::ldexp(mant(rng), ex(rng));
  return v;
}

TEST(ExactSum, OrderAndGroupingDoNotChangeTheBits) {
  const auto terms = wide_terms(5000, 1);
  const double bound = 5000 * std::ldexp(1.0, 20);
  ExactSum ref(1, bound);
  for (float t : terms) ref.add(0, t);
  ref.flush();
  // A float sum of the same terms in another order differs (the test would
  // be empty otherwise); the exact one does not.
  auto shuffled = terms;
  std::mt19937 rng(7);
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  float f1 = 0, f2 = 0;
  for (float t : terms) f1 += t;
  for (float t : shuffled) f2 += t;
  EXPECT_NE(f1, f2);
  ExactSum again(1, bound);
  for (float t : shuffled) again.add(0, t);
  again.flush();
  EXPECT_EQ(ref.value(0), again.value(0));
  // Grouped: partial sums of pieces, each piece's terms rounded to the same
  // grid and added as whole arrays (the split path).
  ExactSum grouped(1, bound);
  for (size_t i = 0; i < shuffled.size(); ++i) grouped.add_all(&shuffled[i]);
  grouped.flush();
  EXPECT_EQ(ref.value(0), grouped.value(0));
}

TEST(ExactSum, IsTheExactSumWhenTheGridIsFineEnough) {
  // The terms are multiples of 2^-64 (exponents >= -40, 24-bit mantissas):
  // their exact sum is an int128 count of 2^-64. The bound's grid, 2^-93,
  // is finer, so nothing is rounded: the result is that sum, to a double.
  const auto terms = wide_terms(3000, 2);
  const double bound = 3000 * std::ldexp(1.0, 20);
  ExactSum s(1, bound);
  __int128 exact = 0;
  for (float t : terms) {
    s.add(0, t);
    exact += static_cast<__int128>(std::ldexp(double(t), 64));
  }
  s.flush();
  EXPECT_EQ(s.value(0), std::ldexp(static_cast<double>(exact), -64));
}

TEST(ExactSum, SplitPathEqualsTheOneTermPathOverManyFlushes) {
  const size_t n = 37, arrays = 150;  // more than one flush of 64 arrays
  ExactSum a(n, arrays * std::ldexp(1.0, 21)), b(n, arrays * std::ldexp(1.0, 21));
  for (size_t k = 0; k < arrays; ++k) {
    const auto v = wide_terms(n, unsigned(100 + k));
    std::vector<double> d(v.begin(), v.end());
    for (size_t i = 0; i < n; ++i) d[i] *= -1.5;  // double terms, 25 significant bits
    a.add_all(d.data());
    for (size_t i = 0; i < n; ++i) b.add(int64_t(i), d[i]);
  }
  a.flush();
  b.flush();
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(a.value(int64_t(i)), b.value(int64_t(i))) << i;
}

TEST(ExactSum, ATermBeyondTheBoundIsAnErrorAndANonFiniteBoundIsNaN) {
  ExactSum s(1, 1.0);
  EXPECT_THROW(s.add(0, 1e10), Error);
  float big = 1e10f;
  EXPECT_THROW(s.add_all(&big), Error);
  ExactSum nan(2, std::numeric_limits<double>::infinity());
  nan.add(0, 1.0);
  nan.flush();
  EXPECT_TRUE(std::isnan(nan.value(0)));
  ExactSum zero(1, 0.0);  // all terms zero
  zero.add(0, 0.0);
  zero.flush();
  EXPECT_EQ(zero.value(0), 0.0);
}

TEST(ExactSum, AllreduceOnOneRankKeepsTheValues) {
  Comm self = Comm::borrow(MPI_COMM_SELF);
  ExactSum s(3, 10.0);
  const float v[3] = {1.5f, -2.25f, 3.0f};
  s.add_all(v);
  s.allreduce(self);
  float out[3];
  s.values(out);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.25f);
  EXPECT_EQ(out[2], 3.0f);
}

}  // namespace
}  // namespace h3d
