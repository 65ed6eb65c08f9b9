// Each registered backend against the reference loops on the convolution,
// GEMM, pooling and pointwise shapes the networks use (backend_ops_test.cpp
// checks every op of every backend on one set of shapes).
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "hybrid3d/backend/ref/ref_backend.hpp"
#include "hybrid3d/backend/registry.hpp"
#include "hybrid3d/core/rng.hpp"
#include "hybrid3d/layers/window_layer.hpp"
#include "test_util.hpp"

using namespace h3d;

namespace {

// Every registered backend but the oracle.
std::vector<std::unique_ptr<Backend>> backends_under_test() {
  std::vector<std::unique_ptr<Backend>> out;
  for (const auto& n : backend_names())
    if (n != "ref") out.push_back(make_backend(n));
  return out;
}

Tensor rnd(std::vector<int64_t> shape, uint64_t seed) {
  Tensor t(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = float(2.0 * uniform01(seed, 5, uint64_t(i)) - 1.0);
  return t;
}

struct ConvCase {
  int k, stride;
  Padding pad;
  bool bias;
};

class ConvBackends : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvBackends, CpuMatchesReference) {
  auto c = GetParam();
  Window1D w = make_window(c.k, c.stride, c.pad);
  ConvDesc d;
  d.n = 2;
  d.cin = 3;
  d.cout = 5;
  d.in = {7, 6, 9};
  for (int i = 0; i < 3; ++i) d.out[size_t(i)] = w.out_extent(d.in[size_t(i)]);
  d.k = {c.k, c.k, c.k};
  d.stride = {c.stride, c.stride, c.stride};
  d.pad_lo = {w.p_lo, w.p_lo, w.p_lo};
  d.pad_hi = {w.p_hi, w.p_hi, w.p_hi};
  d.bias = c.bias;
  Tensor x = rnd({d.n, d.cin, d.in[0], d.in[1], d.in[2]}, 1), wt = rnd({d.cout, d.cin, c.k, c.k, c.k}, 2),
         b = rnd({d.cout}, 3), dy = rnd({d.n, d.cout, d.out[0], d.out[1], d.out[2]}, 4);
  RefBackend ref;
  Tensor y1(dy.shape()), dx1(x.shape()), dw1(wt.shape()), db1({d.cout});
  ref.conv3d_forward(d, x.data(), wt.data(), b.data(), y1.data());
  ref.conv3d_backward_data(d, dy.data(), wt.data(), dx1.data());
  ref.conv3d_backward_weights(d, x.data(), dy.data(), dw1.data(), db1.data());
  // Each backend as it runs these shapes, and with staging buffers of one
  // byte (cpu: forward and backward-data in slabs of one plane along D).
  for (const bool thin : {false, true}) {
    if (thin) ::setenv("H3D_CONV_STAGING_BYTES", "1", 1);
    for (auto& owned : backends_under_test()) {
      Backend& be = *owned;  // the backend under test
      const std::string what = be.name() + (thin ? ", slabs of one plane" : "");
      Tensor y2(dy.shape()), dx2(x.shape()), dw2(wt.shape()), db2({d.cout});
      be.conv3d_forward(d, x.data(), wt.data(), b.data(), y2.data());
      EXPECT_LT(test::rel_diff(y2, y1), test::kTol) << what;
      be.conv3d_backward_data(d, dy.data(), wt.data(), dx2.data());
      EXPECT_LT(test::rel_diff(dx2, dx1), test::kTol) << what;
      be.conv3d_backward_weights(d, x.data(), dy.data(), dw2.data(), db2.data());
      EXPECT_LT(test::rel_diff(dw2, dw1), test::kTol) << what;
      if (c.bias) EXPECT_LT(test::rel_diff(db2, db1), test::kTol) << what;
    }
    ::unsetenv("H3D_CONV_STAGING_BYTES");
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, ConvBackends,
                         ::testing::Values(ConvCase{1, 1, Padding::kValid, true}, ConvCase{2, 1, Padding::kSame, true},
                                           ConvCase{3, 1, Padding::kHalf, false}, ConvCase{3, 2, Padding::kHalf, false},
                                           ConvCase{4, 1, Padding::kSame, true}, ConvCase{5, 1, Padding::kHalf, true},
                                           ConvCase{5, 2, Padding::kValid, false},
                                           ConvCase{2, 2, Padding::kValid, true}));

TEST(GemmBackends, AllTransposes) {
  RefBackend ref;
  for (auto& owned : backends_under_test()) {
    Backend& be = *owned;  // the backend under test
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        int64_t m = 5, n = 7, k = 9;
        Tensor a = rnd({m * k}, 11), b = rnd({k * n}, 12), c1({m * n}), c2({m * n});
        ref.gemm(ta, tb, m, n, k, 1.0f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.0f, c1.data(), n);
        be.gemm(ta, tb, m, n, k, 1.0f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.0f, c2.data(), n);
        EXPECT_LT(test::rel_diff(c2, c1), test::kTol) << ta << tb;
      }
  }
}

TEST(PoolReference, MaxAndAvgByHand) {
  RefBackend ref;
  PoolDesc d;
  d.in = {2, 2, 2};
  d.out = {1, 1, 1};
  Tensor x({1, 1, 2, 2, 2});
  for (int i = 0; i < 8; ++i) x[i] = float(i == 5 ? 10 : i);
  Tensor y({1, 1, 1, 1, 1}), dx(x.shape()), dy({1, 1, 1, 1, 1}, 1.0f);
  ref.pool3d_forward(d, x.data(), y.data());
  EXPECT_EQ(y[0], 10.0f);
  ref.pool3d_backward(d, x.data(), dy.data(), dx.data());
  EXPECT_EQ(dx[5], 1.0f);
  d.kind = PoolKind::kAvg;
  ref.pool3d_forward(d, x.data(), y.data());
  EXPECT_FLOAT_EQ(y[0], (0 + 1 + 2 + 3 + 4 + 10 + 6 + 7) / 8.0f);
}

// The CPU pooling loops against the reference, with ties (values rounded to
// a few levels) so that "first maximum in window order" is exercised.
TEST(PoolBackends, CpuMatchesReference) {
  RefBackend ref;
  for (auto& owned : backends_under_test()) {
    Backend& be = *owned;  // the backend under test
    struct Case {
      int k, s;
      std::array<int64_t, 3> in;
    };
    for (Case c : {Case{2, 2, {8, 6, 10}}, Case{2, 2, {9, 7, 11}}, Case{3, 2, {9, 7, 11}}, Case{3, 1, {5, 6, 7}},
                   Case{1, 2, {5, 6, 7}}})
      for (PoolKind kind : {PoolKind::kMax, PoolKind::kAvg}) {
        PoolDesc d;
        d.kind = kind;
        d.n = 2;
        d.c = 3;
        d.in = c.in;
        for (int i = 0; i < 3; ++i) d.out[size_t(i)] = (c.in[size_t(i)] - c.k) / c.s + 1;
        d.k = {c.k, c.k, c.k};
        d.stride = {c.s, c.s, c.s};
        Tensor x = rnd({2, 3, c.in[0], c.in[1], c.in[2]}, 3);
        for (int64_t i = 0; i < x.numel(); ++i) x[i] = std::round(x[i] * 3.0f);
        Tensor dy = rnd({2, 3, d.out[0], d.out[1], d.out[2]}, 4);
        Tensor y1(dy.shape()), y2(dy.shape()), dx1(x.shape()), dx2(x.shape());
        ref.pool3d_forward(d, x.data(), y1.data());
        be.pool3d_forward(d, x.data(), y2.data());
        ref.pool3d_backward(d, x.data(), dy.data(), dx1.data());
        be.pool3d_backward(d, x.data(), dy.data(), dx2.data());
        EXPECT_LT(test::rel_diff(y2, y1), test::kTol) << c.k << c.s << int(kind);
        EXPECT_LT(test::rel_diff(dx2, dx1), test::kTol) << c.k << c.s << int(kind);
      }
  }
}

// Max pooling that records each output's cell (pool3d_forward_argmax, the
// first layer's stream) against the same backend's pooling from x: the
// same outputs, and from the records alone the same input gradient, bitwise
// (ties from rounded values, so "first maximum in window order" counts;
// negative values, so the ReLU's slope by the recorded sign counts), with
// and without that slope, for 2x2x2 windows that tile (rows of 16 windows
// and a tail), other tiling windows, and windows that overlap or pad.
TEST(PoolBackends, ArgmaxRecordsGiveTheSameGradientAsX) {
  int cases = 0;
  for (auto& owned : backends_under_test()) {
    Backend& be = *owned;
    struct Case {
      int k, s, p;
      std::array<int64_t, 3> in;
    };
    for (Case c : {Case{2, 2, 0, {4, 6, 42}}, Case{2, 2, 0, {8, 6, 32}}, Case{3, 3, 0, {6, 9, 12}},
                   Case{3, 2, 1, {7, 6, 9}}})
      for (float slope : {-1.0f, 0.0f, 0.3f}) {
        PoolDesc d;
        d.n = 2;
        d.c = 3;
        d.in = c.in;
        for (int i = 0; i < 3; ++i) d.out[size_t(i)] = (c.in[size_t(i)] + 2 * c.p - c.k) / c.s + 1;
        d.k = {c.k, c.k, c.k};
        d.stride = {c.s, c.s, c.s};
        d.pad_lo = d.pad_hi = {c.p, c.p, c.p};
        d.relu_grad_slope = slope;
        Tensor x = rnd({2, 3, c.in[0], c.in[1], c.in[2]}, 5);
        for (int64_t i = 0; i < x.numel(); ++i) x[i] = std::round(x[i] * 3.0f);
        Tensor dy = rnd({2, 3, d.out[0], d.out[1], d.out[2]}, 6);
        Tensor y(dy.shape()), y_arg(dy.shape()), dx(x.shape()), dx_arg(x.shape(), 7.0f);
        std::vector<uint8_t> arg(size_t(dy.numel()), 0xFF);
        be.pool3d_forward(d, x.data(), y.data());
        be.pool3d_forward_argmax(d, x.data(), y_arg.data(), arg.data());
        be.pool3d_backward(d, x.data(), dy.data(), dx.data());
        be.pool3d_backward_argmax(d, arg.data(), dy.data(), dx_arg.data());
        const std::string what = be.name() + " k" + std::to_string(c.k) + " s" + std::to_string(c.s) + " p" +
                                 std::to_string(c.p) + " W " + std::to_string(c.in[2]) + " slope " +
                                 std::to_string(slope);
        EXPECT_EQ(test::rel_diff(y_arg, y), 0.0) << what << ": outputs";
        EXPECT_EQ(std::memcmp(dx_arg.data(), dx.data(), size_t(dx.numel()) * sizeof(float)), 0) << what << ": dx";
        ++cases;
      }
  }
  EXPECT_EQ(cases, 4 * 3 * int(backends_under_test().size()));
}

// Average pooling that pads inside the kernel (Pool3d on a block whose only
// halo is the global edge's padding) gives bitwise what the same backend
// gives on a zero-padded copy of the input (the path of every other block),
// forward and backward, with padding on one side or both.
TEST(PoolBackends, AveragePaddingInTheKernelEqualsAPaddedCopy) {
  int cases = 0;
  for (auto& owned : backends_under_test()) {
    Backend& be = *owned;
    struct Case {
      int k, s;
      std::array<int, 3> lo, hi;
      std::array<int64_t, 3> in;
    };
    for (Case c : {Case{3, 2, {1, 1, 1}, {1, 1, 1}, {8, 6, 10}}, Case{3, 2, {1, 0, 1}, {0, 1, 1}, {9, 7, 11}},
                   Case{2, 1, {0, 1, 0}, {1, 0, 1}, {5, 6, 17}}, Case{3, 1, {1, 1, 1}, {1, 1, 1}, {4, 3, 33}}}) {
      PoolDesc d;
      d.kind = PoolKind::kAvg;
      d.n = 2;
      d.c = 3;
      d.in = c.in;
      d.k = {c.k, c.k, c.k};
      d.stride = {c.s, c.s, c.s};
      d.pad_lo = c.lo;
      d.pad_hi = c.hi;
      std::array<int64_t, 3> padded{};
      for (size_t i = 0; i < 3; ++i) {
        padded[i] = c.in[i] + c.lo[i] + c.hi[i];
        d.out[i] = (padded[i] - c.k) / c.s + 1;
      }
      PoolDesc p = d;
      p.in = padded;
      p.pad_lo = p.pad_hi = {0, 0, 0};
      Tensor x = rnd({2, 3, c.in[0], c.in[1], c.in[2]}, 41), dy = rnd({2, 3, d.out[0], d.out[1], d.out[2]}, 42);
      x[0] = -0.0f;  // a signed zero next to the padding
      Tensor xp({2, 3, padded[0], padded[1], padded[2]});
      for (int64_t q = 0; q < 6; ++q)
        for (int64_t z = 0; z < c.in[0]; ++z)
          for (int64_t r = 0; r < c.in[1]; ++r)
            for (int64_t v = 0; v < c.in[2]; ++v)
              xp[((q * padded[0] + z + c.lo[0]) * padded[1] + r + c.lo[1]) * padded[2] + v + c.lo[2]] =
                  x[((q * c.in[0] + z) * c.in[1] + r) * c.in[2] + v];
      Tensor y(dy.shape()), y_copy(dy.shape()), dx(x.shape()), dx_copy(xp.shape());
      be.pool3d_forward(d, x.data(), y.data());
      be.pool3d_forward(p, xp.data(), y_copy.data());
      EXPECT_EQ(std::memcmp(y.data(), y_copy.data(), size_t(y.numel()) * sizeof(float)), 0)
          << be.name() << " k" << c.k << " s" << c.s << ": forward";
      be.pool3d_backward(d, nullptr, dy.data(), dx.data());
      be.pool3d_backward(p, nullptr, dy.data(), dx_copy.data());
      int64_t differ = 0;
      for (int64_t q = 0; q < 6; ++q)
        for (int64_t z = 0; z < c.in[0]; ++z)
          for (int64_t r = 0; r < c.in[1]; ++r)
            for (int64_t v = 0; v < c.in[2]; ++v) {
              const float
                  a = dx[((q * c.in[0] + z) * c.in[1] + r) * c.in[2] + v],
                  b = dx_copy[((q * padded[0] + z + c.lo[0]) * padded[1] + r + c.lo[1]) * padded[2] + v + c.lo[2]];
              differ += std::memcmp(&a, &b, sizeof(float)) != 0;
            }
      EXPECT_EQ(differ, 0) << be.name() << " k" << c.k << " s" << c.s << ": backward";
      ++cases;
    }
  }
  EXPECT_EQ(cases, 4 * int(backends_under_test().size()));
}

// Sign masks and the masked gradient, on a length that is not a multiple
// of 64 (the tail) and spans several threads' chunks.
TEST(PointwiseBackends, CpuMatchesReference) {
  RefBackend ref;
  for (auto& owned : backends_under_test()) {
    Backend& be = *owned;  // the backend under test
    const int64_t n = (1 << 17) + 77;
    Tensor x = rnd({n}, 7), dy = rnd({n}, 8), y1({n}), y2({n}), dx1({n}), dx2({n});
    x[5] = 0.0f;  // zero counts as not positive
    std::vector<uint64_t> m1(size_t((n + 63) / 64)), m2(m1.size());
    for (ActKind k : {ActKind::kRelu, ActKind::kLeakyRelu}) {
      ref.activation_forward(k, 0.3f, x.data(), y1.data(), n);
      be.activation_forward(k, 0.3f, x.data(), y2.data(), n);
      EXPECT_EQ(test::rel_diff(y2, y1), 0.0);
    }
    ref.sign_mask(y1.data(), m1.data(), n);
    be.sign_mask(y1.data(), m2.data(), n);
    EXPECT_EQ(m1, m2);
    ref.masked_slope_backward(m1.data(), 0.3f, dy.data(), dx1.data(), n);
    be.masked_slope_backward(m2.data(), 0.3f, dy.data(), dx2.data(), n);
    EXPECT_EQ(test::rel_diff(dx2, dx1), 0.0);
    ref.activation_backward(ActKind::kLeakyRelu, 0.3f, y1.data(), dy.data(), dx2.data(), n);
    EXPECT_EQ(test::rel_diff(dx2, dx1), 0.0);  // the mask path equals the output path
  }
}

}  // namespace

// The first layer of cosmoflow as the trainer runs it (already padded input
// of log1p counts: non-negative, few distinct values, so rounding errors
// correlate), forward and backward-weights, against the reference (double
// accumulation): the forward to a few fp32 ulps of the output's scale, the
// 65536-point weight-gradient sums to the general tolerance.
TEST(ConvBackends, FirstLayerOnCounts) {
  for (int k : {2, 3}) {
    ConvDesc d;
    d.n = 2;
    d.cin = 4;
    d.cout = 32;
    d.k = {k, k, k};
    d.in = {31 + k, 31 + k, 31 + k};
    d.out = {32, 32, 32};
    d.bias = true;
    Tensor x({d.n, d.cin, d.in[0], d.in[1], d.in[2]}), wt = rnd({d.cout, d.cin, k, k, k}, 2), b = rnd({d.cout}, 3),
                                                       dy = rnd({d.n, d.cout, 32, 32, 32}, 4);
    for (int64_t i = 0; i < x.numel(); ++i) x[i] = std::log1p(float(int(8.0 * uniform01(7, 1, uint64_t(i)))));
    RefBackend ref;
    for (auto& owned : backends_under_test()) {
      Backend& be = *owned;  // the backend under test
      Tensor y1(dy.shape()), y2(dy.shape()), dw1(wt.shape()), dw2(wt.shape()), db1({d.cout}), db2({d.cout});
      ref.conv3d_forward(d, x.data(), wt.data(), b.data(), y1.data());
      be.conv3d_forward(d, x.data(), wt.data(), b.data(), y2.data());
      EXPECT_LT(test::rel_diff(y2, y1), 1e-6) << "kernel " << k;
      ref.conv3d_backward_weights(d, x.data(), dy.data(), dw1.data(), db1.data());
      be.conv3d_backward_weights(d, x.data(), dy.data(), dw2.data(), db2.data());
      EXPECT_LT(test::rel_diff(dw2, dw1), test::kTol) << "kernel " << k;
    }
  }
}

// The weight gradient of a convolution with few input channels (1 to 16:
// the first layers, which the cpu backend runs on its own kernels or on
// channels-last layouts)
// gives the same bits whatever the thread count (so a rank's result does
// not depend on --threads, and --deterministic holds across layouts whose
// ranks have different thread counts), and stays within the tolerance of
// the reference, over several slabs per sample, both strides and padding
// inside the kernel.
TEST(ConvBackends, FewChannelWeightGradientIgnoresThreadCount) {
  const int threads_before = omp_get_max_threads();
  int cases = 0;
  for (auto& owned : backends_under_test())
    for (int64_t cin : {1, 4, 16})
      for (auto [k, stride, pad, cout] : {std::tuple{2, 1, 0, 32}, std::tuple{3, 1, 1, 16}, std::tuple{3, 2, 1, 16}}) {
        ConvDesc d;
        d.n = 2;
        d.cin = cin;
        d.cout = cout;
        d.in = {30, 21, 45};
        for (size_t i = 0; i < 3; ++i) d.out[i] = (d.in[i] + 2 * pad - k) / stride + 1;
        d.k = {k, k, k};
        d.stride = {stride, stride, stride};
        d.pad_lo = d.pad_hi = {pad, pad, pad};
        d.bias = true;
        Tensor x = rnd({d.n, d.cin, d.in[0], d.in[1], d.in[2]}, 21),
               dy = rnd({d.n, d.cout, d.out[0], d.out[1], d.out[2]}, 22);
        Tensor ref_w({d.cout, d.cin, k, k, k}), ref_b({d.cout});
        RefBackend().conv3d_backward_weights(d, x.data(), dy.data(), ref_w.data(), ref_b.data());
        std::vector<Tensor> dw, db;
        for (int t : {1, 2, 3}) {
          omp_set_num_threads(t);
          dw.emplace_back(ref_w.shape());
          db.emplace_back(ref_b.shape());
          owned->conv3d_backward_weights(d, x.data(), dy.data(), dw.back().data(), db.back().data());
        }
        omp_set_num_threads(threads_before);
        const std::string what = owned->name() + " cin " + std::to_string(cin) + " k" + std::to_string(k) + " s" +
                                 std::to_string(stride) + " pad " + std::to_string(pad);
        EXPECT_LT(test::rel_diff(dw[0], ref_w), test::kTol) << what;
        EXPECT_LT(test::rel_diff(db[0], ref_b), test::kTol) << what;
        for (size_t t = 1; t < dw.size(); ++t) {
          EXPECT_EQ(std::memcmp(dw[t].data(), dw[0].data(), size_t(dw[0].numel()) * sizeof(float)), 0)
              << what << ": " << t + 1 << " threads";
          EXPECT_EQ(std::memcmp(db[t].data(), db[0].data(), size_t(db[0].numel()) * sizeof(float)), 0)
              << what << ": " << t + 1 << " threads";
        }
        ++cases;
      }
  EXPECT_EQ(cases, 9 * int(backends_under_test().size()));
}

// A leaky ReLU fused into the convolution's forward (ConvDesc's
// fused_leaky_slope; Network::setup fuses a Conv3d and the LeakyReLU after
// it) gives bitwise what the convolution and then activation_forward give,
// on every backend, for the whole output and for a region, with zeros
// among the outputs (output channel 0 has zero weights and bias).
TEST(ConvBackends, FusedLeakyReluEqualsConvThenActivation) {
  auto all = backends_under_test();
  all.push_back(make_backend("ref"));
  int cases = 0;
  for (auto& owned : all)
    for (int64_t c : {4, 16})
      for (int k : {2, 3}) {
        ConvDesc d;
        d.n = 2;
        d.cin = c;
        d.cout = 16;
        d.k = {k, k, k};
        d.in = {9, 8, 10};
        for (int i = 0; i < 3; ++i) d.out[size_t(i)] = d.in[size_t(i)] - k + 1;
        d.bias = true;
        Tensor x = rnd({d.n, d.cin, d.in[0], d.in[1], d.in[2]}, 31), wt = rnd({d.cout, d.cin, k, k, k}, 32),
               b = rnd({d.cout}, 33);
        for (int64_t i = 0; i < d.cin * k * k * k; ++i) wt[i] = 0.0f;  // output channel 0: all zeros
        b[0] = 0.0f;
        Tensor plain({d.n, d.cout, d.out[0], d.out[1], d.out[2]}), fused(plain.shape()), region(plain.shape(), 7.0f);
        owned->conv3d_forward(d, x.data(), wt.data(), b.data(), plain.data());
        owned->activation_forward(ActKind::kLeakyRelu, 0.3f, plain.data(), plain.data(), plain.numel());
        ConvDesc f = d;
        f.fused_leaky_slope = 0.3f;
        owned->conv3d_forward(f, x.data(), wt.data(), b.data(), fused.data());
        EXPECT_EQ(std::memcmp(fused.data(), plain.data(), size_t(plain.numel()) * sizeof(float)), 0)
            << owned->name() << " c" << c << " k" << k;
        const Box box{{Range{1, d.out[0]}, Range{0, 3}, Range{2, d.out[2]}}};
        owned->conv3d_forward_region(f, x.data(), wt.data(), b.data(), region.data(), box);
        const int64_t plane = d.out[1] * d.out[2], vol = d.out[0] * plane;
        for (int64_t q = 0; q < d.n * d.cout; ++q)
          for (int64_t z = box.r[0].lo; z < box.r[0].hi; ++z)
            for (int64_t yy = box.r[1].lo; yy < box.r[1].hi; ++yy)
              for (int64_t v = box.r[2].lo; v < box.r[2].hi; ++v) {
                const int64_t at = q * vol + z * plane + yy * d.out[2] + v;
                ASSERT_EQ(std::memcmp(&region[at], &plain[at], sizeof(float)), 0)
                    << owned->name() << " c" << c << " k" << k << " region output " << at;
              }
        ++cases;
      }
  EXPECT_EQ(cases, 4 * int(all.size()));
}

// A convolution computed box by box (an interior and the faces around it,
// as the halo overlap does, or any single box) gives each output bitwise as
// the whole convolution does, on every backend: so --overlap on and off give
// the same bits. Channel counts that oneDNN blocks (8, 16) and does not (1,
// 3), every kernel size, both strides, outputs from 1 to 8 voxels wide, and
// boxes down to a single voxel (which oneDNN would otherwise run as an inner
// product, in another order). Like the layers, the kernel gets a padded copy
// of its input and no padding of its own.
TEST(ConvBackends, RegionsEqualTheWholeBitwise) {
  auto all = backends_under_test();
  all.push_back(make_backend("ref"));
  int cases = 0, boxes = 0;
  for (auto& owned : all)
    for (int64_t c : {1, 3, 8, 16})
      for (int k = 1; k <= 5; ++k)
        for (int stride : {1, 2})
          for (int64_t side : {3, 5, 8}) {
            // No padding: the layers pass the kernel a halo-padded copy.
            const Window1D w = make_window(k, stride, Padding::kValid);
            ConvDesc d;
            d.n = 2;
            d.cin = c;
            d.cout = c == 1 ? 8 : c;
            d.in = {side + k - 1, side + k, side + k - 2};
            for (int i = 0; i < 3; ++i) d.out[size_t(i)] = w.out_extent(d.in[size_t(i)]);
            d.k = {k, k, k};
            d.stride = {stride, stride, stride};
            d.pad_lo = {w.p_lo, w.p_lo, w.p_lo};
            d.pad_hi = {w.p_hi, w.p_hi, w.p_hi};
            d.bias = true;
            const uint64_t seed = uint64_t(cases) * 3;
            Tensor x = rnd({d.n, d.cin, d.in[0], d.in[1], d.in[2]}, seed + 1),
                   wt = rnd({d.cout, d.cin, k, k, k}, seed + 2), b = rnd({d.cout}, seed + 3);
            Tensor whole({d.n, d.cout, d.out[0], d.out[1], d.out[2]});
            owned->conv3d_forward(d, x.data(), wt.data(), b.data(), whole.data());
            const Box all{{Range{0, d.out[0]}, Range{0, d.out[1]}, Range{0, d.out[2]}}};
            // The overlap's tiling: an interior one voxel in from each side, and the faces.
            Box inner;
            for (int i = 0; i < 3; ++i) inner.r[i] = Range{1, std::max<int64_t>(1, d.out[size_t(i)] - 1)};
            std::vector<Box> tiles = PaddedInput::around(all, inner);
            if (!inner.empty()) tiles.push_back(inner);
            Tensor tiled(whole.shape(), std::nanf(""));
            for (const Box& r : tiles) owned->conv3d_forward_region(d, x.data(), wt.data(), b.data(), tiled.data(), r);
            EXPECT_EQ(std::memcmp(tiled.data(), whole.data(), size_t(whole.numel()) * sizeof(float)), 0)
                << owned->name() << " c" << c << " k" << k << " s" << stride << " side " << side << ": tiles differ";
            // Single voxels: the last one, and the centre.
            for (const std::array<int64_t, 3>& p : {std::array<int64_t, 3>{d.out[0] - 1, d.out[1] - 1, d.out[2] - 1},
                                                    std::array<int64_t, 3>{d.out[0] / 2, d.out[1] / 2, d.out[2] / 2}}) {
              const Box one{{Range{p[0], p[0] + 1}, Range{p[1], p[1] + 1}, Range{p[2], p[2] + 1}}};
              Tensor y(whole.shape(), std::nanf(""));
              owned->conv3d_forward_region(d, x.data(), wt.data(), b.data(), y.data(), one);
              for (int64_t q = 0; q < d.n * d.cout; ++q) {
                const int64_t at = ((q * d.out[0] + p[0]) * d.out[1] + p[1]) * d.out[2] + p[2];
                ASSERT_EQ(std::memcmp(&y[at], &whole[at], sizeof(float)), 0)
                    << owned->name() << " c" << c << " k" << k << " s" << stride << " side " << side << ": voxel ("
                    << p[0] << "," << p[1] << "," << p[2] << ") of plane " << q << ": " << y[at] << " vs " << whole[at];
              }
              ++boxes;
            }
            boxes += int(tiles.size());
            ++cases;
          }
  EXPECT_EQ(cases, int(all.size()) * 4 * 5 * 2 * 3);
  std::printf("[ checked  ] %d convolutions, %d boxes on %zu backends\n", cases, boxes, all.size());
}
