// Reference per-voxel parts of the losses: the regression's squared error,
// the softmax cross-entropy and Dice sums and gradient (train/seg_loss.hpp
// states the maths), in double, voxel by voxel.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "hybrid3d/backend/ref/ref_backend.hpp"

namespace h3d {

namespace {

// Softmax over the K channels of voxel v: p[k] (double).
void softmax_at(const float* z, int64_t K, int64_t vol, int64_t v, double* p) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t k = 0; k < K; ++k) mx = std::max(mx, double(z[k * vol + v]));
  double sum = 0;
  for (int64_t k = 0; k < K; ++k) sum += p[k] = std::exp(double(z[k * vol + v]) - mx);
  for (int64_t k = 0; k < K; ++k) p[k] /= sum;
}

bool counted(int32_t y, const SoftmaxLossDesc& d) { return y != d.ignore_label && y >= 0 && y < d.classes; }

double weight_of(int32_t y, const SoftmaxLossDesc& d) {
  return d.class_weights ? double(d.class_weights[size_t(y)]) : 1.0;
}

}  // namespace

double RefBackend::squared_error(int64_t n, const float* y, const float* t, double denom, float* dy, double* largest) {
  double sse = 0, top = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = double(y[i]) - t[i];
    sse += d * d;
    top = std::max(top, d * d);
    dy[i] = float(2.0 * d / denom);
  }
  *largest = top;
  return sse;
}

void RefBackend::softmax_loss_sums(const SoftmaxLossDesc& d, const float* z, const int32_t* labels, int64_t v0,
                                   int64_t v1, double* sums) {
  const int64_t K = d.classes;
  std::vector<double> p(static_cast<size_t>(K));
  for (int64_t v = v0; v < v1; ++v) {
    const int32_t y = labels[v];
    if (!counted(y, d)) continue;
    softmax_at(z, K, d.volume, v, p.data());
    const double w = weight_of(y, d);
    sums[0] += w * -std::log(std::max(p[size_t(y)], 1e-300));
    sums[1] += w;
    for (int64_t k = 0; k < K; ++k) {
      sums[2 + k] += p[size_t(k)] * (k == y);  // I
      sums[2 + K + k] += p[size_t(k)];         // P
      sums[2 + 2 * K + k] += (k == y);         // G
    }
  }
}

void RefBackend::softmax_loss_grad(const SoftmaxLossDesc& d, const SoftmaxLossGrad& c, const float* z,
                                   const int32_t* labels, float* dz) {
  const int64_t K = d.classes, vol = d.volume;
  std::vector<double> p(static_cast<size_t>(K)), dp(static_cast<size_t>(K)), g(static_cast<size_t>(K));
  for (int64_t v = 0; v < vol; ++v) {
    const int32_t y = labels[v];
    if (!counted(y, d)) {
      for (int64_t k = 0; k < K; ++k) dz[k * vol + v] = 0.0f;
      continue;
    }
    softmax_at(z, K, vol, v, p.data());
    std::fill(g.begin(), g.end(), 0.0);
    if (c.ce) {
      const double w = weight_of(y, d) / c.ce_total * c.ce_factor;
      for (int64_t k = 0; k < K; ++k) g[size_t(k)] += w * (p[size_t(k)] - (k == y));
    }
    if (c.dice) {
      double dot = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double D = c.dice_denom[k], I2 = c.dice_i2[k];
        dp[size_t(k)] = -c.dice_factor / double(K) * (2.0 * (k == y) * D - I2) / (D * D);
        dot += p[size_t(k)] * dp[size_t(k)];
      }
      for (int64_t k = 0; k < K; ++k) g[size_t(k)] += p[size_t(k)] * (dp[size_t(k)] - dot);
    }
    for (int64_t k = 0; k < K; ++k) dz[k * vol + v] = float(g[size_t(k)]);
  }
}

}  // namespace h3d
