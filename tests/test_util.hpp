// Helpers shared by the tests: tensors filled as a pure function of global
// coordinates (so every rank can make its block of "the same" tensor), and
// comparisons with the tolerance of the equivalence tests.
#pragma once
#include <cstdint>
#include <string>

#include "hybrid3d/core/box.hpp"
#include "hybrid3d/core/tensor.hpp"

namespace h3d::test {

// [n, c, box] with element (s, c, z, y, x) = U(-1, 1) from (seed, s0 + s, c, z, y, x).
Tensor global_random(uint64_t seed, int64_t n, int64_t c, const Box& box, std::array<int64_t, 3> extent,
                     int64_t s0 = 0);
// The [n, c, box] block of a whole-volume tensor [N, C, extent] from sample s0 on.
Tensor block_of(const Tensor& whole, const Box& box, int64_t s0, int64_t n);
// max |a - b| / max(max |b|, floor); shapes must agree. The floor is for
// tensors whose true value is zero (a conv bias followed by batch norm).
double rel_diff(const Tensor& a, const Tensor& b, double floor = 1e-30);
// The same shape and the same bits.
bool same_bits(const Tensor& a, const Tensor& b);
// The tolerance of the issue: max abs difference <= tol * max abs value.
constexpr double kTol = 1e-5;

}  // namespace h3d::test
