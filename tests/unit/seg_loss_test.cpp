// Segmentation losses against a direct computation on the whole volume, and
// their gradients against finite differences; metrics on a case counted by
// hand.
#include <gtest/gtest.h>

#include <cmath>

#include "hybrid3d/backend/ref/ref_backend.hpp"
#include "hybrid3d/core/rng.hpp"
#include "hybrid3d/train/seg_loss.hpp"
#include "test_util.hpp"

using namespace h3d;

namespace {

constexpr int64_t K = 3;
const std::array<int64_t, 3> kExt{3, 4, 5};
const int64_t kVol = 60;

Tensor logits(int64_t n) {
  return test::global_random(11, n, K, Box{{Range{0, 3}, Range{0, 4}, Range{0, 5}}}, kExt);
}
// Labels 0..2, and 7 (the ignore label) on about one voxel in ten.
std::vector<int32_t> labels(int64_t n) {
  std::vector<int32_t> y(size_t(n * kVol));
  for (size_t i = 0; i < y.size(); ++i) {
    const uint64_t h = hash_key(3, 4, i) % 10;
    y[i] = h == 9 ? 7 : int32_t(h % 3);
  }
  return y;
}

// The definitions, in the plainest form.
double direct(const SegLossOptions& o, const Tensor& z, const std::vector<int32_t>& y) {
  const int64_t n = z.dim(0);
  double ce_num = 0, ce_den = 0, I[K] = {}, P[K] = {}, G[K] = {};
  for (int64_t s = 0; s < n; ++s)
    for (int64_t v = 0; v < kVol; ++v) {
      const int32_t t = y[size_t(s * kVol + v)];
      if (t == o.ignore_label) continue;
      double e[K], sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += e[k] = std::exp(double(z[(s * K + k) * kVol + v]));
      const double w = o.class_weights.empty() ? 1.0 : o.class_weights[size_t(t)];
      ce_num += -w * std::log(e[t] / sum);
      ce_den += w;
      for (int64_t k = 0; k < K; ++k) {
        I[k] += e[k] / sum * (k == t);
        P[k] += e[k] / sum;
        G[k] += (k == t);
      }
    }
  double dice = 0;
  for (int64_t k = 0; k < K; ++k) dice += (2 * I[k] + o.dice_eps) / (P[k] + G[k] + o.dice_eps) / K;
  const double ce = ce_num / ce_den, dl = 1 - dice;
  if (o.kind == "ce") return ce;
  if (o.kind == "dice") return dl;
  return o.ce_weight * ce + o.dice_weight * dl;
}

std::vector<SegLossOptions> cases() {
  std::vector<SegLossOptions> out(4);
  out[0].kind = "ce";
  out[1].kind = "ce";
  out[1].class_weights = {0.2f, 1.0f, 3.0f};
  out[1].ignore_label = 7;
  out[2].kind = "dice";
  out[2].ignore_label = 7;
  out[3].kind = "ce+dice";
  out[3].ce_weight = 0.7;
  out[3].dice_weight = 1.3;
  out[3].ignore_label = 7;
  out[3].class_weights = {0.5f, 1.0f, 2.0f};
  return out;
}

TEST(SegLoss, EqualsTheDefinitionOnTheWholeVolume) {
  Comm self = Comm::borrow(MPI_COMM_SELF);
  RefBackend ref;
  for (auto o : cases()) {
    Tensor z = logits(2), dz;
    std::vector<int32_t> y = labels(2);
    if (o.ignore_label != 7)
      for (auto& t : y) t = t == 7 ? 1 : t;  // no ignore label here: every voxel a class
    const SegLossValue v = segmentation_loss(ref, self, o, z, y, dz);
    EXPECT_NEAR(v.loss, direct(o, z, y), 1e-12 * std::abs(v.loss)) << o.kind;
  }
}

TEST(SegLoss, GradientEqualsFiniteDifferences) {
  Comm self = Comm::borrow(MPI_COMM_SELF);
  RefBackend ref;
  for (auto o : cases()) {
    Tensor z = logits(2), dz, unused;
    const std::vector<int32_t> y = labels(2);
    if (o.ignore_label != 7) o.ignore_label = 7;
    segmentation_loss(ref, self, o, z, y, dz);
    for (int t = 0; t < 40; ++t) {
      const int64_t i = int64_t(hash_key(5, 9, uint64_t(t)) % uint64_t(z.numel()));
      const float keep = z[i];
      const double h = 1e-2;
      z[i] = keep + float(h);
      const double lp = segmentation_loss(ref, self, o, z, y, unused).loss;
      z[i] = keep - float(h);
      const double lm = segmentation_loss(ref, self, o, z, y, unused).loss;
      z[i] = keep;
      const double fd = (lp - lm) / (2 * h);
      EXPECT_NEAR(dz[i], fd, 1e-5 + 2e-3 * std::abs(fd)) << o.kind << " element " << i;
    }
  }
}

TEST(SegLoss, BadLabelsAndOptions) {
  Comm self = Comm::borrow(MPI_COMM_SELF);
  RefBackend ref;
  Tensor z = logits(1), dz;
  std::vector<int32_t> y(size_t(kVol), 1);
  y[5] = 3;  // outside 0..2
  SegLossOptions o;
  EXPECT_THROW(segmentation_loss(ref, self, o, z, y, dz), UsageError);
  o.kind = "focal";
  EXPECT_THROW(o.validate(K), UsageError);
  o.kind = "ce";
  o.class_weights = {1.0f, 2.0f};
  EXPECT_THROW(o.validate(K), UsageError);
}

TEST(SegMetrics, CountedByHand) {
  // 6 voxels, 1 sample, logits one-hot on the predicted class.
  const int32_t truth[6] = {0, 0, 1, 1, 2, 2}, pred[6] = {0, 1, 1, 1, 0, 2};
  Tensor z({1, K, 1, 1, 6});
  for (int v = 0; v < 6; ++v) z[pred[v] * 6 + v] = 1.0f;
  SegMetrics m(K);
  m.add(z, std::vector<int32_t>(truth, truth + 6), -1);
  // class 0: TP 1, FP 1 (voxel 4), FN 1 (voxel 1); class 1: TP 2, FP 1; class 2: TP 1, FN 1.
  EXPECT_DOUBLE_EQ(m.dice(0), 2.0 / 4.0);
  EXPECT_DOUBLE_EQ(m.iou(0), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.dice(1), 4.0 / 5.0);
  EXPECT_DOUBLE_EQ(m.dice(2), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.accuracy(), 4.0 / 6.0);
  SegMetrics empty(K);
  EXPECT_TRUE(std::isnan(empty.dice(1)));
}

}  // namespace
