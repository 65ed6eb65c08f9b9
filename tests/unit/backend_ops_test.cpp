// The op harness: every op of every registered backend against the
// reference backend, on the same inputs (ggml's test-backend-ops). A new
// backend is checked by registering it; a new op by adding it to kOps and
// one check below (the test fails while an op of kOps is unchecked).
//
// Bitwise where the op is a copy or a per-element formula (the layers rely
// on it: --deterministic, halo overlap on/off), within kTol where the
// backend may sum in another order (convolutions, GEMMs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "hybrid3d/backend/ref/ref_backend.hpp"
#include "hybrid3d/backend/registry.hpp"
#include "hybrid3d/core/rng.hpp"
#include "test_util.hpp"

using namespace h3d;

namespace {

// Every virtual op of Backend (backend.hpp and BoxKernels), by name.
const std::vector<std::string> kOps = {"conv3d_forward",
                                       "conv3d_forward_region",
                                       "conv3d_backward_data",
                                       "conv3d_backward_weights",
                                       "pool3d_forward",
                                       "pool3d_backward",
                                       "gemm",
                                       "activation_forward",
                                       "activation_backward",
                                       "sign_mask",
                                       "masked_slope_backward",
                                       "channel_moments",
                                       "channel_affine",
                                       "channel_grad_moments",
                                       "channel_grad_apply",
                                       "copy_box",
                                       "relayout_in_place",
                                       "fill_outside",
                                       "fill",
                                       "axpy",
                                       "add_bias_rows",
                                       "column_sums",
                                       "concat_samples",
                                       "split_samples",
                                       "dropout",
                                       "sgd_update",
                                       "adam_update",
                                       "all_finite",
                                       "squared_error",
                                       "softmax_loss_sums",
                                       "softmax_loss_grad"};

std::vector<float> rnd(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = scale * float(2.0 * uniform01(seed, 31, uint64_t(i)) - 1.0);
  return v;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 1e-30, d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, double(std::fabs(b[i])));
    d = std::max(d, double(std::fabs(a[i] - b[i])));
  }
  return a.size() == b.size() ? d / m : 1e30;
}

std::vector<std::string> backends_under_test() {
  std::vector<std::string> out;
  for (const auto& n : backend_names())
    if (n != "ref") out.push_back(n);
  return out;
}

class BackendOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { be_ = make_backend(GetParam()); }
  // Runs one op's check; records that it ran.
  void check(const std::string& op, const std::function<void()>& body) {
    SCOPED_TRACE(GetParam() + "." + op);
    body();
    checked_.insert(op);
  }
  std::unique_ptr<Backend> be_;
  RefBackend ref_;
  std::set<std::string> checked_;
};

ConvDesc conv_case(int k, int stride, int pad, bool bias) {
  ConvDesc d;
  d.n = 2;
  d.cin = 3;
  d.cout = 5;
  d.in = {7, 6, 9};
  for (size_t i = 0; i < 3; ++i) d.out[i] = (d.in[i] + 2 * pad - k) / stride + 1;
  d.k = {k, k, k};
  d.stride = {stride, stride, stride};
  d.pad_lo = {pad, pad, pad};
  d.pad_hi = {pad, pad, pad};
  d.bias = bias;
  return d;
}

int64_t count3(const std::array<int64_t, 3>& e) { return e[0] * e[1] * e[2]; }

TEST_P(BackendOps, EveryOpAgainstRef) {
  Backend &be = *be_, &ref = ref_;
  // Convolutions (more shapes and the first layer: backend_test.cpp).
  for (auto [k, s, p, bias] : {std::tuple{3, 1, 1, true}, std::tuple{2, 2, 0, false}, std::tuple{1, 1, 0, true}}) {
    const ConvDesc d = conv_case(k, s, p, bias);
    const auto x = rnd(d.n * d.cin * count3(d.in), 1), w = rnd(d.cout * d.cin * k * k * k, 2), b = rnd(d.cout, 3),
               dy = rnd(d.n * d.cout * count3(d.out), 4);
    std::vector<float> y1(dy.size()), y2(dy.size());
    check("conv3d_forward", [&] {
      ref.conv3d_forward(d, x.data(), w.data(), b.data(), y1.data());
      be.conv3d_forward(d, x.data(), w.data(), b.data(), y2.data());
      EXPECT_LT(rel(y2, y1), test::kTol);
    });
    check("conv3d_forward_region", [&] {
      const Box region{{Range{1, d.out[0]}, Range{0, 2}, Range{1, d.out[2] - 1}}};
      std::vector<float> r(y2.size(), -7.0f);
      be.conv3d_forward_region(d, x.data(), w.data(), b.data(), r.data(), region);
      for (int64_t q = 0; q < d.n * d.cout; ++q)
        for (int64_t z = 0; z < d.out[0]; ++z)
          for (int64_t h = 0; h < d.out[1]; ++h)
            for (int64_t v = 0; v < d.out[2]; ++v) {
              const size_t at = size_t(((q * d.out[0] + z) * d.out[1] + h) * d.out[2] + v);
              const bool inside = z >= region.r[0].lo && z < region.r[0].hi && h >= region.r[1].lo &&
                                  h < region.r[1].hi && v >= region.r[2].lo && v < region.r[2].hi;
              ASSERT_EQ(r[at], inside ? y2[at] : -7.0f) << "output " << at;  // bitwise as the whole
            }
    });
    check("conv3d_backward_data", [&] {
      std::vector<float> dx1(x.size()), dx2(x.size());
      ref.conv3d_backward_data(d, dy.data(), w.data(), dx1.data());
      be.conv3d_backward_data(d, dy.data(), w.data(), dx2.data());
      EXPECT_LT(rel(dx2, dx1), test::kTol);
    });
    check("conv3d_backward_weights", [&] {
      std::vector<float> dw1(w.size()), dw2(w.size()), db1(b.size()), db2(b.size());
      ref.conv3d_backward_weights(d, x.data(), dy.data(), dw1.data(), bias ? db1.data() : nullptr);
      be.conv3d_backward_weights(d, x.data(), dy.data(), dw2.data(), bias ? db2.data() : nullptr);
      EXPECT_LT(rel(dw2, dw1), test::kTol);
      EXPECT_LT(rel(db2, db1), test::kTol);
    });
  }
  // Pooling, with ties (first maximum in window order), padded and not.
  for (PoolKind kind : {PoolKind::kMax, PoolKind::kAvg})
    for (int pad : {0, 1}) {
      PoolDesc d;
      d.kind = kind;
      d.n = 2;
      d.c = 3;
      d.in = {6, 7, 8};
      d.k = {3, 3, 3};
      d.pad_lo = {pad, pad, pad};
      d.pad_hi = {pad, pad, pad};
      for (size_t i = 0; i < 3; ++i) d.out[i] = (d.in[i] + 2 * pad - 3) / 2 + 1;
      auto x = rnd(d.n * d.c * count3(d.in), 5);
      for (auto& v : x) v = std::round(v * 3.0f);
      const auto dy = rnd(d.n * d.c * count3(d.out), 6);
      std::vector<float> y1(dy.size()), y2(dy.size()), dx1(x.size()), dx2(x.size());
      check("pool3d_forward", [&] {
        ref.pool3d_forward(d, x.data(), y1.data());
        be.pool3d_forward(d, x.data(), y2.data());
        EXPECT_LT(rel(y2, y1), test::kTol);
      });
      check("pool3d_backward", [&] {
        ref.pool3d_backward(d, x.data(), dy.data(), dx1.data());
        be.pool3d_backward(d, x.data(), dy.data(), dx2.data());
        EXPECT_LT(rel(dx2, dx1), test::kTol);
      });
    }
  // Max pooling whose 2x2x2 windows tile the input (cosmoflow's), which the
  // cpu backend runs without branches: ties (integer values, signed zeros)
  // and NaNs in a window's first and later cells must pick the reference's
  // cell, bit for bit.
  {
    PoolDesc d;
    d.n = 2;
    d.c = 3;
    d.in = {4, 6, 10};
    d.k = d.stride = {2, 2, 2};
    d.out = {2, 3, 5};
    auto x = rnd(d.n * d.c * count3(d.in), 12);
    for (auto& v : x) v = std::round(v * 2.0f);
    x[0] = -0.0f, x[1] = 0.0f;                        // signed zeros in the first window
    x[2] = std::numeric_limits<float>::quiet_NaN();   // a NaN first cell
    x[41] = std::numeric_limits<float>::quiet_NaN();  // a NaN later in a window
    x[123] = 100.0f, x[133] = 100.0f;                 // a tie for the maximum
    const auto dy = rnd(d.n * d.c * count3(d.out), 13);
    std::vector<float> dx1(x.size()), dx2(x.size(), 7.0f);
    check("pool3d_backward", [&] {
      ref.pool3d_backward(d, x.data(), dy.data(), dx1.data());
      be.pool3d_backward(d, x.data(), dy.data(), dx2.data());
      EXPECT_TRUE(same_bits(dx2, dx1)) << "2x2x2 tiled max pooling";
    });
  }
  // Max pooling whose windows tile the input may write dx over x (Pool3d
  // does, backend.hpp allows it): 2x2x2 (the cpu backend's branch-free
  // kernel) and 3x3x3 windows, with ties, signed zeros and NaNs, bitwise as
  // into a separate buffer, on the reference and on each backend.
  for (int k : {2, 3}) {
    PoolDesc d;
    d.n = 2;
    d.c = 3;
    d.k = d.stride = {k, k, k};
    d.out = {2, 3, 4};
    for (size_t i = 0; i < 3; ++i) d.in[i] = d.out[i] * k;
    auto x = rnd(d.n * d.c * count3(d.in), 14);
    for (auto& v : x) v = std::round(v * 2.0f);
    x[0] = -0.0f, x[1] = 0.0f;
    x[2] = std::numeric_limits<float>::quiet_NaN();
    x[50] = std::numeric_limits<float>::quiet_NaN();
    const auto dy = rnd(d.n * d.c * count3(d.out), 15);
    std::vector<float> apart(x.size()), ref_over = x, be_over = x;
    check("pool3d_backward", [&] {
      ref.pool3d_backward(d, x.data(), dy.data(), apart.data());
      ref.pool3d_backward(d, ref_over.data(), dy.data(), ref_over.data());
      be.pool3d_backward(d, be_over.data(), dy.data(), be_over.data());
      EXPECT_TRUE(same_bits(ref_over, apart)) << k << "^3 windows: the reference, dx over x";
      EXPECT_TRUE(same_bits(be_over, apart)) << k << "^3 windows: dx over x";
    });
  }
  // Max pooling with the ReLU's gradient after it (PoolDesc::relu_grad_slope,
  // Network's fusion) gives bitwise what the pooling and then
  // masked_slope_backward on the ReLU's sign bits give: windows that tile
  // (2^3, the cpu backend's branch-free kernel, and 3^3), into a separate
  // buffer and over x, and overlapping 3^3 stride 2 windows (the scatter);
  // slopes 0 (ReLU) and 0.3; ties, signed zeros, NaNs, non-positive maxima.
  for (auto [k, s] : {std::pair{2, 2}, std::pair{3, 3}, std::pair{3, 2}})
    for (float slope : {0.0f, 0.3f}) {
      PoolDesc d;
      d.n = 2;
      d.c = 3;
      d.k = {k, k, k};
      d.stride = {s, s, s};
      d.out = {2, 3, 4};
      for (size_t i = 0; i < 3; ++i) d.in[i] = (d.out[i] - 1) * s + k;
      auto x = rnd(d.n * d.c * count3(d.in), 16);
      for (auto& v : x) v = std::round(v * 2.0f) - 1.0f;  // many windows whose maximum is <= 0
      x[0] = -0.0f, x[1] = 0.0f;
      x[2] = std::numeric_limits<float>::quiet_NaN();
      x[50] = std::numeric_limits<float>::quiet_NaN();
      const auto dy = rnd(d.n * d.c * count3(d.out), 17);
      const size_t cells = x.size();
      std::vector<uint64_t> bits((cells + 63) / 64, 0);
      for (size_t i = 0; i < cells; ++i)
        if (x[i] > 0.0f) bits[i / 64] |= uint64_t(1) << (i % 64);
      // Each backend against its own pooling then masked_slope_backward
      // (overlapping windows add in float on cpu, in double on ref).
      std::vector<float> apart(cells), be_apart(cells);
      ref.pool3d_backward(d, x.data(), dy.data(), apart.data());
      ref.masked_slope_backward(bits.data(), slope, apart.data(), apart.data(), int64_t(cells));
      PoolDesc f = d;
      f.relu_grad_slope = slope;
      const std::string what = std::to_string(k) + "^3 stride " + std::to_string(s) + " slope " + std::to_string(slope);
      check("pool3d_backward", [&] {
        be.pool3d_backward(d, x.data(), dy.data(), be_apart.data());
        be.masked_slope_backward(bits.data(), slope, be_apart.data(), be_apart.data(), int64_t(cells));
        std::vector<float> ref_fused(cells, 7.0f), be_fused(cells, 7.0f);
        ref.pool3d_backward(f, x.data(), dy.data(), ref_fused.data());
        be.pool3d_backward(f, x.data(), dy.data(), be_fused.data());
        EXPECT_TRUE(same_bits(ref_fused, apart)) << what << ": the reference";
        EXPECT_TRUE(same_bits(be_fused, be_apart)) << what;
        if (k == s) {  // windows tile the input: dx over x
          std::vector<float> ref_over = x, be_over = x;
          ref.pool3d_backward(f, ref_over.data(), dy.data(), ref_over.data());
          be.pool3d_backward(f, be_over.data(), dy.data(), be_over.data());
          EXPECT_TRUE(same_bits(ref_over, apart)) << what << ": the reference, dx over x";
          EXPECT_TRUE(same_bits(be_over, be_apart)) << what << ": dx over x";
        }
      });
    }
  check("gemm", [&] {
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 0.5f}) {
          const int64_t m = 5, n = 7, k = 9;
          const auto a = rnd(m * k, 7), b = rnd(k * n, 8);
          auto c1 = rnd(m * n, 9), c2 = c1;
          ref.gemm(ta, tb, m, n, k, 1.5f, a.data(), ta ? m : k, b.data(), tb ? k : n, beta, c1.data(), n);
          be.gemm(ta, tb, m, n, k, 1.5f, a.data(), ta ? m : k, b.data(), tb ? k : n, beta, c2.data(), n);
          EXPECT_LT(rel(c2, c1), test::kTol) << ta << tb << beta;
        }
  });
  // Pointwise: a length past several threads' chunks, not a multiple of 64.
  const int64_t n = (1 << 17) + 77;
  auto x = rnd(n, 10, 3.0f);
  x[5] = 0.0f;
  const auto dy = rnd(n, 11);
  for (ActKind k : {ActKind::kRelu, ActKind::kLeakyRelu, ActKind::kTanh, ActKind::kScaledTanh, ActKind::kScale}) {
    std::vector<float> y1(static_cast<size_t>(n)), y2(static_cast<size_t>(n)), dx1(static_cast<size_t>(n)),
        dx2(static_cast<size_t>(n));
    check("activation_forward", [&] {
      ref.activation_forward(k, 0.3f, x.data(), y1.data(), n);
      be.activation_forward(k, 0.3f, x.data(), y2.data(), n);
      EXPECT_TRUE(same_bits(y2, y1)) << int(k);
    });
    check("activation_backward", [&] {
      ref.activation_backward(k, 0.3f, y1.data(), dy.data(), dx1.data(), n);
      be.activation_backward(k, 0.3f, y1.data(), dy.data(), dx2.data(), n);
      EXPECT_TRUE(same_bits(dx2, dx1)) << int(k);
    });
  }
  std::vector<uint64_t> m1(size_t((n + 63) / 64)), m2(m1.size());
  check("sign_mask", [&] {
    ref.sign_mask(x.data(), m1.data(), n);
    be.sign_mask(x.data(), m2.data(), n);
    EXPECT_TRUE(same_bits(m2, m1));
  });
  check("masked_slope_backward", [&] {
    std::vector<float> dx1(static_cast<size_t>(n)), dx2 = dy;  // the backend's in place (dx may be dy)
    ref.masked_slope_backward(m1.data(), 0.2f, dy.data(), dx1.data(), n);
    be.masked_slope_backward(m1.data(), 0.2f, dx2.data(), dx2.data(), n);
    EXPECT_TRUE(same_bits(dx2, dx1));
  });
  // Batch norm's per-channel parts over [n, c, v].
  {
    const int64_t bn = 2, c = 3, v = 1000;
    const auto bx = rnd(bn * c * v, 12, 2.0f), bdy = rnd(bn * c * v, 13), p1 = rnd(c, 14), p2 = rnd(c, 15),
               p3 = rnd(c, 16), mean = rnd(c, 17);
    check("channel_moments", [&] {
      std::vector<double> s1(static_cast<size_t>(c)), q1(static_cast<size_t>(c)), s2(static_cast<size_t>(c)),
          q2(static_cast<size_t>(c));
      ref.channel_moments(bx.data(), bn, c, v, s1.data(), q1.data());
      be.channel_moments(bx.data(), bn, c, v, s2.data(), q2.data());
      for (size_t i = 0; i < size_t(c); ++i) {
        EXPECT_NEAR(s2[i], s1[i], 1e-9 * (1 + std::fabs(s1[i])));
        EXPECT_NEAR(q2[i], q1[i], 1e-9 * (1 + std::fabs(q1[i])));
      }
    });
    check("channel_affine", [&] {
      std::vector<float> y1(bx.size()), y2(bx.size());
      ref.channel_affine(bx.data(), bn, c, v, p1.data(), p2.data(), y1.data());
      be.channel_affine(bx.data(), bn, c, v, p1.data(), p2.data(), y2.data());
      EXPECT_TRUE(same_bits(y2, y1));
    });
    check("channel_grad_moments", [&] {
      std::vector<double> s1(static_cast<size_t>(c)), q1(static_cast<size_t>(c)), s2(static_cast<size_t>(c)),
          q2(static_cast<size_t>(c));
      ref.channel_grad_moments(bx.data(), bdy.data(), bn, c, v, mean.data(), s1.data(), q1.data());
      be.channel_grad_moments(bx.data(), bdy.data(), bn, c, v, mean.data(), s2.data(), q2.data());
      for (size_t i = 0; i < size_t(c); ++i) {
        EXPECT_NEAR(s2[i], s1[i], 1e-9 * (1 + std::fabs(s1[i])));
        EXPECT_NEAR(q2[i], q1[i], 1e-9 * (1 + std::fabs(q1[i])));
      }
    });
    check("channel_grad_apply", [&] {
      std::vector<float> dx1(bx.size()), dx2(bx.size());
      ref.channel_grad_apply(bx.data(), bdy.data(), bn, c, v, mean.data(), p1.data(), p2.data(), p3.data(), dx1.data());
      be.channel_grad_apply(bx.data(), bdy.data(), bn, c, v, mean.data(), p1.data(), p2.data(), p3.data(), dx2.data());
      EXPECT_LT(rel(dx2, dx1), 1e-6);
    });
  }
  // Box moves: an own block, a padded box around it, a halo face.
  {
    const int64_t nc = 3;
    const Box own{{Range{2, 6}, Range{1, 4}, Range{3, 8}}}, padded{{Range{1, 7}, Range{0, 5}, Range{2, 9}}};
    const Box face{{Range{2, 6}, Range{1, 4}, Range{3, 4}}};
    const auto src = rnd(nc * own.volume(), 18);
    for (CopyMode mode : {CopyMode::kAssign, CopyMode::kAdd})
      check("copy_box", [&] {
        auto d1 = rnd(nc * padded.volume(), 19), d2 = d1;
        ref.copy_box(src.data(), own, d1.data(), padded, own, nc, mode);
        be.copy_box(src.data(), own, d2.data(), padded, own, nc, mode);
        EXPECT_TRUE(same_bits(d2, d1));
        std::vector<float> p1(size_t(nc * face.volume())), p2(p1.size());  // packing a face
        ref.copy_box(src.data(), own, p1.data(), face, face, nc, mode == CopyMode::kAdd ? CopyMode::kAssign : mode);
        be.copy_box(src.data(), own, p2.data(), face, face, nc, mode == CopyMode::kAdd ? CopyMode::kAssign : mode);
        EXPECT_TRUE(same_bits(p2, p1));
      });
    check("relayout_in_place", [&] {
      for (bool grow : {true, false}) {
        auto t1 = rnd(nc * padded.volume(), 20), t2 = t1;
        const Box &from = grow ? own : padded, &to = grow ? padded : own;
        ref.relayout_in_place(t1.data(), nc, from, to, own);
        be.relayout_in_place(t2.data(), nc, from, to, own);
        EXPECT_TRUE(same_bits(t2, t1)) << grow;
      }
    });
    check("fill_outside", [&] {
      auto t1 = rnd(nc * padded.volume(), 21), t2 = t1;
      ref.fill_outside(t1.data(), nc, padded, own, -1.0f);
      be.fill_outside(t2.data(), nc, padded, own, -1.0f);
      EXPECT_TRUE(same_bits(t2, t1));
    });
  }
  // Per-element ops of the layers.
  check("fill", [&] {
    std::vector<float> a(size_t(n), 1.0f), b(size_t(n), 2.0f);
    ref.fill(a.data(), n, 0.25f);
    be.fill(b.data(), n, 0.25f);
    EXPECT_TRUE(same_bits(b, a));
  });
  check("axpy", [&] {
    auto a = dy, b = dy;
    ref.axpy(n, 0.75f, x.data(), a.data());
    be.axpy(n, 0.75f, x.data(), b.data());
    EXPECT_TRUE(same_bits(b, a));
  });
  const int64_t rows = 5, cols = 37;
  const auto mat = rnd(rows * cols, 22), bias = rnd(cols, 23);
  check("add_bias_rows", [&] {
    auto a = mat, b = mat;
    ref.add_bias_rows(rows, cols, bias.data(), a.data());
    be.add_bias_rows(rows, cols, bias.data(), b.data());
    EXPECT_TRUE(same_bits(b, a));
  });
  check("column_sums", [&] {
    std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
    ref.column_sums(rows, cols, mat.data(), a.data());
    be.column_sums(rows, cols, mat.data(), b.data());
    EXPECT_TRUE(same_bits(b, a));
  });
  {
    const int64_t s = 3, la = 70, lb = 45;
    const auto a = rnd(s * la, 25), b = rnd(s * lb, 26);
    std::vector<float> y1(size_t(s * (la + lb))), y2(y1.size());
    check("concat_samples", [&] {
      ref.concat_samples(s, la, a.data(), lb, b.data(), y1.data());
      be.concat_samples(s, la, a.data(), lb, b.data(), y2.data());
      EXPECT_TRUE(same_bits(y2, y1));
    });
    check("split_samples", [&] {
      std::vector<float> a1(a.size()), b1(b.size()), a2(a.size()), b2(b.size());
      ref.split_samples(s, la, lb, y1.data(), a1.data(), b1.data());
      be.split_samples(s, la, lb, y1.data(), a2.data(), b2.data());
      EXPECT_TRUE(same_bits(a2, a1) && same_bits(b2, b1));
      EXPECT_TRUE(same_bits(a1, a) && same_bits(b1, b));  // the inverse of concat
    });
  }
  for (bool spatial : {true, false})
    check("dropout", [&] {
      DropoutDesc d;
      d.p = 0.3f;
      d.seed = 9;
      d.stream = 77;
      d.spatial = spatial;
      d.box = Box{{Range{2, 6}, Range{0, 5}, Range{4, 11}}};
      d.global = {8, 5, 12};
      d.per_sample = 3 * d.box.volume();
      d.sample_counter = {0, 3 * 8 * 5 * 12 * 5, 3 * 8 * 5 * 12 * 2};
      const int64_t total = d.per_sample * 3;
      std::vector<float> a(static_cast<size_t>(total)), b = rnd(total, 27);
      ref.dropout(d, b.data(), a.data());
      be.dropout(d, b.data(), b.data());  // in place
      EXPECT_TRUE(same_bits(b, a));
      int64_t dropped = 0;
      for (float v : a) dropped += v == 0.0f;
      EXPECT_NEAR(double(dropped) / double(total), 0.3, 0.05);  // the mask is not all or nothing
    });
  // The optimizer updates, three steps each.
  {
    const int64_t m = 1000;
    const auto g = rnd(m, 28);
    for (float momentum : {0.0f, 0.9f})
      check("sgd_update", [&] {
        auto w1 = rnd(m, 29), w2 = w1;
        std::vector<float> v1(static_cast<size_t>(m)), v2(static_cast<size_t>(m));
        for (int step = 0; step < 3; ++step) {
          const SgdStep s{0.1f, 0.01f, momentum, step == 0};
          ref.sgd_update(s, m, w1.data(), g.data(), momentum != 0 ? v1.data() : nullptr);
          be.sgd_update(s, m, w2.data(), g.data(), momentum != 0 ? v2.data() : nullptr);
        }
        EXPECT_TRUE(same_bits(w2, w1) && same_bits(v2, v1));
      });
    check("adam_update", [&] {
      auto w1 = rnd(m, 30), w2 = w1;
      std::vector<float> m1v(static_cast<size_t>(m)), v1(static_cast<size_t>(m)), m2v(static_cast<size_t>(m)),
          v2(static_cast<size_t>(m));
      for (int t = 1; t <= 3; ++t) {
        AdamStep s;
        s.beta1 = 0.9f;
        s.one_minus_beta1 = 0.1f;
        s.beta2 = 0.999f;
        s.one_minus_beta2 = float(1 - 0.999);
        s.weight_decay = 0.01f;
        s.c2 = 1 - std::pow(0.999, t);
        s.lr_over_c1 = float(1e-3 / (1 - std::pow(0.9, t)));
        s.eps = 1e-8;
        ref.adam_update(s, m, w1.data(), g.data(), m1v.data(), v1.data());
        be.adam_update(s, m, w2.data(), g.data(), m2v.data(), v2.data());
      }
      EXPECT_TRUE(same_bits(w2, w1) && same_bits(m2v, m1v) && same_bits(v2, v1));
    });
  }
  check("all_finite", [&] {
    auto v = x;
    EXPECT_TRUE(be.all_finite(v.data(), n));
    for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
      v[size_t(n - 3)] = bad;  // near the end: every chunk is looked at
      EXPECT_EQ(be.all_finite(v.data(), n), ref.all_finite(v.data(), n));
      EXPECT_FALSE(be.all_finite(v.data(), n));
    }
  });
  check("squared_error", [&] {
    const auto y = rnd(36, 31), t = rnd(36, 32);
    std::vector<float> d1(36), d2(36);
    double l1 = 0, l2 = 0;
    const double s1 = ref.squared_error(36, y.data(), t.data(), 36.0, d1.data(), &l1);
    const double s2 = be.squared_error(36, y.data(), t.data(), 36.0, d2.data(), &l2);
    EXPECT_EQ(s2, s1);
    EXPECT_EQ(l2, l1);
    EXPECT_TRUE(same_bits(d2, d1));
  });
  // Softmax losses: 3 classes, an ignored label, weights, on one sample.
  {
    const int64_t K = 3, vol = 4 * 5 * 6;
    const auto z = rnd(K * vol, 33, 4.0f);
    std::vector<int32_t> labels(static_cast<size_t>(vol));
    for (int64_t v = 0; v < vol; ++v) labels[size_t(v)] = int32_t(hash_key(3, 4, uint64_t(v)) % 4);  // 3: ignored
    const std::vector<float> weights = {0.5f, 1.0f, 2.0f};
    SoftmaxLossDesc d;
    d.classes = K;
    d.volume = vol;
    d.ignore_label = 3;
    d.class_weights = weights.data();
    std::vector<double> s1(size_t(3 * K + 2)), s2(s1.size());
    check("softmax_loss_sums", [&] {
      ref.softmax_loss_sums(d, z.data(), labels.data(), 0, vol, s1.data());
      be.softmax_loss_sums(d, z.data(), labels.data(), 0, vol, s2.data());
      EXPECT_TRUE(same_bits(s2, s1));
      EXPECT_GT(s1[1], 0.0);  // some voxels counted
    });
    check("softmax_loss_grad", [&] {
      std::vector<double> denom(static_cast<size_t>(K)), i2(static_cast<size_t>(K));
      for (int64_t k = 0; k < K; ++k) {
        denom[size_t(k)] = s1[size_t(2 + K + k)] + s1[size_t(2 + 2 * K + k)] + 1e-5;
        i2[size_t(k)] = 2 * s1[size_t(2 + k)] + 1e-5;
      }
      SoftmaxLossGrad g;
      g.ce = g.dice = true;
      g.ce_total = s1[1];
      g.ce_factor = 0.7;
      g.dice_factor = 1.3;
      g.dice_denom = denom.data();
      g.dice_i2 = i2.data();
      std::vector<float> dz1(z.size()), dz2(z.size(), 5.0f);
      ref.softmax_loss_grad(d, g, z.data(), labels.data(), dz1.data());
      be.softmax_loss_grad(d, g, z.data(), labels.data(), dz2.data());
      EXPECT_TRUE(same_bits(dz2, dz1));
    });
  }
  // Every op of the interface was checked.
  for (const auto& op : kOps) EXPECT_TRUE(checked_.count(op)) << op << " has no check in the harness";
  EXPECT_EQ(checked_.size(), kOps.size()) << "an op was checked that kOps does not list";
  std::printf("[ checked  ] %zu ops of backend %s against ref\n", checked_.size(), GetParam().c_str());
}

INSTANTIATE_TEST_SUITE_P(Registered, BackendOps, ::testing::ValuesIn(backends_under_test()),
                         [](const auto& info) { return info.param; });

TEST(BackendRegistry, NamesHelpAndErrors) {
  const auto names = backend_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "ref"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu"), names.end());
  for (const auto& n : names) {
    EXPECT_EQ(make_backend(n)->name(), n);
    EXPECT_NE(backend_help().find(n + " ("), std::string::npos) << n;
  }
  try {
    make_backend("cuda-nope");
    ADD_FAILURE() << "an unknown backend was made";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("cpu, ref"), std::string::npos) << e.what();
  }
}

// A tensor takes its storage from its allocator and gives it back there;
// a moved tensor keeps the allocator of its storage.
class CountingAllocator : public Allocator {
 public:
  const char* name() const override { return "counting"; }
  FloatBuffer take(size_t n) override {
    ++takes;
    return host_allocator().take(n);
  }
  void give(FloatBuffer&& b) override {
    ++gives;
    host_allocator().give(std::move(b));
  }
  bool host_accessible() const override { return true; }
  int takes = 0, gives = 0;
};

TEST(TensorAllocator, StorageComesFromAndGoesBackToItsAllocator) {
  CountingAllocator counting;
  {
    Tensor t(counting);
    t.resize({4, 5}, 1.0f);
    EXPECT_EQ(counting.takes, 1);
    Tensor copy = t;  // an empty tensor copies the allocator with the contents
    EXPECT_EQ(&copy.allocator(), &counting);
    EXPECT_EQ(counting.takes, 2);
    Tensor moved = std::move(t);
    EXPECT_EQ(&moved.allocator(), &counting);
    EXPECT_EQ(counting.gives, 0);
    moved.release();
    EXPECT_EQ(counting.gives, 1);
    Tensor host({3});
    EXPECT_EQ(&host.allocator(), &host_allocator());
    EXPECT_THROW(host.set_allocator(counting), Error);  // it holds storage
  }
  EXPECT_EQ(counting.gives, counting.takes);
}

}  // namespace
