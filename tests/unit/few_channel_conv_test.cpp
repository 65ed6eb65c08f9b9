// The cpu backend's own kernels for few input channels (stride 1:
// cpu_few_channel_conv.hpp) against oneDNN's path for the same shapes and
// against the reference: forward (whole, regions, fused leaky ReLU) over
// channel counts 1 to 4, backward-weights (with and without bias) over 1 to
// 16, kernels 1 to 3, output widths that leave partial vectors (tails),
// output channel and tap counts that leave partial register tiles. A machine
// without AVX-512 does not run these kernels; the test then says so and
// skips.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "hybrid3d/backend/cpu/cpu_few_channel_conv.hpp"
#include "hybrid3d/backend/ref/ref_backend.hpp"
#include "hybrid3d/backend/registry.hpp"
#include "hybrid3d/core/rng.hpp"
#include "test_util.hpp"

using namespace h3d;

namespace {

Tensor random_tensor(std::vector<int64_t> shape, uint64_t seed) {
  Tensor t(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = float(2.0 * uniform01(seed, 9, uint64_t(i)) - 1.0);
  return t;
}

// Runs f with the few-channel kernels switched off (oneDNN's path).
template <typename F>
void with_onednn_path(F f) {
  ::setenv("H3D_FEW_CHANNEL_CONV", "0", 1);
  f();
  ::unsetenv("H3D_FEW_CHANNEL_CONV");
}

bool within(const Range& r, int64_t i) { return i >= r.lo && i < r.hi; }

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return std::memcmp(a.data(), b.data(), size_t(a.numel()) * sizeof(float)) == 0;
}

// A 4-channel 2^3 convolution: the kernels take it wherever they run.
ConvDesc first_layer_shape() {
  ConvDesc d;
  d.cin = 4;
  d.in = {9, 9, 9};
  d.out = {8, 8, 8};
  d.k = {2, 2, 2};
  return d;
}

constexpr const char* kNoAvx512 = "this CPU has no AVX-512F: the few-channel kernels do not run";

}  // namespace

TEST(FewChannelConv, MatchesOneDnnAndTheReference) {
  if (!few_channel_conv_applies(first_layer_shape())) GTEST_SKIP() << kNoAvx512;
  auto cpu = make_backend("cpu");
  RefBackend ref;
  int cases = 0, forward_cases = 0;
  for (int64_t cin : {1, 3, 4, 9, 16})
    for (int k : {1, 2, 3})
      for (int64_t cout : {5, 16})
        for (bool bias : {true, false}) {
          ConvDesc d;
          d.n = 2;
          d.cin = cin;
          d.cout = cout;
          d.k = {k, k, k};
          d.out = {4, 11, 37};  // rows: a chunk of 8 and 3; 37: two whole vectors and a tail of 5
          for (size_t i = 0; i < 3; ++i) d.in[i] = d.out[i] + k - 1;
          d.bias = bias;
          ASSERT_TRUE(few_channel_weights_apply(d));
          ASSERT_EQ(few_channel_conv_applies(d), cin <= kFewChannelMaxInputs);
          const std::string what = "cin " + std::to_string(cin) + " k" + std::to_string(k) + " cout " +
                                   std::to_string(cout) + (bias ? " bias" : "");
          const uint64_t seed = uint64_t(cases) * 5;
          Tensor x = random_tensor({d.n, cin, d.in[0], d.in[1], d.in[2]}, seed),
                 w = random_tensor({cout, cin, k, k, k}, seed + 1), b = random_tensor({cout}, seed + 2),
                 dy = random_tensor({d.n, cout, d.out[0], d.out[1], d.out[2]}, seed + 3);
          if (few_channel_conv_applies(d)) {
            Tensor y(dy.shape()), y_onednn(dy.shape()), y_ref(dy.shape());
            cpu->conv3d_forward(d, x.data(), w.data(), b.data(), y.data());
            with_onednn_path([&] { cpu->conv3d_forward(d, x.data(), w.data(), b.data(), y_onednn.data()); });
            ref.conv3d_forward(d, x.data(), w.data(), b.data(), y_ref.data());
            EXPECT_LT(test::rel_diff(y, y_onednn), 1e-6) << what;
            EXPECT_LT(test::rel_diff(y, y_ref), 1e-6) << what;

            // A region: its outputs bitwise as the whole, nothing else touched.
            const Box region{{Range{1, 4}, Range{2, 7}, Range{3, 36}}};
            Tensor part(dy.shape(), 7.0f);
            cpu->conv3d_forward_region(d, x.data(), w.data(), b.data(), part.data(), region);
            int64_t inside = 0, wrong = 0;
            for (int64_t q = 0; q < d.n * cout; ++q)
              for (int64_t z = 0; z < d.out[0]; ++z)
                for (int64_t r = 0; r < d.out[1]; ++r)
                  for (int64_t c = 0; c < d.out[2]; ++c) {
                    const int64_t at = ((q * d.out[0] + z) * d.out[1] + r) * d.out[2] + c;
                    const bool in = within(region.r[0], z) && within(region.r[1], r) && within(region.r[2], c);
                    inside += in;
                    wrong += in ? std::memcmp(&part[at], &y[at], sizeof(float)) != 0 : part[at] != 7.0f;
                  }
            EXPECT_EQ(wrong, 0) << what << ": region outputs differ from the whole, or the region wrote outside";
            EXPECT_EQ(inside, d.n * cout * 3 * 5 * 33);

            // Fused leaky ReLU: bitwise the convolution, then the activation.
            ConvDesc f = d;
            f.fused_leaky_slope = 0.3f;
            Tensor fused(dy.shape()), then(y);
            cpu->conv3d_forward(f, x.data(), w.data(), b.data(), fused.data());
            cpu->activation_forward(ActKind::kLeakyRelu, 0.3f, then.data(), then.data(), then.numel());
            EXPECT_TRUE(bitwise_equal(fused, then)) << what << ": fused leaky ReLU";
            ++forward_cases;
          }

          Tensor dw(w.shape()), db({cout}), dw_onednn(w.shape()), db_onednn({cout}), dw_ref(w.shape()), db_ref({cout});
          cpu->conv3d_backward_weights(d, x.data(), dy.data(), dw.data(), db.data());
          with_onednn_path(
              [&] { cpu->conv3d_backward_weights(d, x.data(), dy.data(), dw_onednn.data(), db_onednn.data()); });
          ref.conv3d_backward_weights(d, x.data(), dy.data(), dw_ref.data(), db_ref.data());
          EXPECT_LT(test::rel_diff(dw, dw_onednn), test::kTol) << what;
          EXPECT_LT(test::rel_diff(dw, dw_ref), test::kTol) << what;
          if (bias) EXPECT_LT(test::rel_diff(db, db_ref), test::kTol) << what;
          if (!bias) EXPECT_EQ(test::rel_diff(db, Tensor({cout}, 0.0f)), 0.0) << what << ": db without a bias";
          ++cases;
        }
  EXPECT_EQ(cases, 5 * 3 * 2 * 2);
  EXPECT_EQ(forward_cases, 3 * 3 * 2 * 2);
}

// Where the kernels apply: stride 1, no padding of the kernel's own, at
// most 4 input channels forward and 16 in backward-weights; the switch
// sends them back to oneDNN.
TEST(FewChannelConv, AppliesOnlyWhereItShould) {
  const ConvDesc d = first_layer_shape();
  if (!few_channel_conv_applies(d)) GTEST_SKIP() << kNoAvx512;
  ConvDesc wide = d, wider = d, strided = d, padded = d;
  wide.cin = 5;
  wider.cin = 17;
  strided.stride = {1, 2, 1};
  padded.pad_lo = {0, 0, 1};
  EXPECT_FALSE(few_channel_conv_applies(wide));
  EXPECT_TRUE(few_channel_weights_apply(wide));
  EXPECT_FALSE(few_channel_weights_apply(wider));
  for (const ConvDesc& no : {strided, padded}) {
    EXPECT_FALSE(few_channel_conv_applies(no));
    EXPECT_FALSE(few_channel_weights_apply(no));
  }
  with_onednn_path([&] {
    EXPECT_FALSE(few_channel_conv_applies(d));
    EXPECT_FALSE(few_channel_weights_apply(d));
  });
  EXPECT_TRUE(few_channel_conv_applies(d));
  EXPECT_TRUE(few_channel_weights_apply(d));
}
