#include <algorithm>
// Reference matrix product, activations and per-channel reductions.
#include <cmath>
#include <vector>

#include "hybrid3d/backend/ref/ref_backend.hpp"

namespace h3d {

void RefBackend::gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                      const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        double av = ta ? a[p * lda + i] : a[i * lda + p];
        double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        acc += av * bv;
      }
      float prev = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
      c[i * ldc + j] = static_cast<float>(alpha * acc + prev);
    }
}

void RefBackend::activation_forward(ActKind kind, float p, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    switch (kind) {
      case ActKind::kRelu: y[i] = v > 0 ? v : 0.0f; break;
      case ActKind::kLeakyRelu: y[i] = v > 0 ? v : p * v; break;
      case ActKind::kTanh: y[i] = std::tanh(v); break;
      case ActKind::kScaledTanh: y[i] = p * std::tanh(v); break;
      case ActKind::kScale: y[i] = p * v; break;
    }
  }
}

void RefBackend::activation_backward(ActKind kind, float p, const float* y, const float* dy, float* dx,
                                     int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float v = y[i], g = dy[i];
    switch (kind) {
      // With a positive slope, sign(y) == sign(x): the output is enough.
      case ActKind::kRelu: dx[i] = v > 0 ? g : 0.0f; break;
      case ActKind::kLeakyRelu: dx[i] = v > 0 ? g : p * g; break;
      case ActKind::kTanh: dx[i] = g * (1.0f - v * v); break;
      case ActKind::kScaledTanh: {
        float t = v / p;
        dx[i] = g * p * (1.0f - t * t);
        break;
      }
      case ActKind::kScale: dx[i] = p * g; break;
    }
  }
}

void RefBackend::sign_mask(const float* y, uint64_t* bits, int64_t n) {
  for (int64_t w = 0; w * 64 < n; ++w) {
    uint64_t b = 0;
    for (int64_t j = 0, e = std::min<int64_t>(64, n - w * 64); j < e; ++j) b |= uint64_t(y[w * 64 + j] > 0) << j;
    bits[w] = b;
  }
}

void RefBackend::masked_slope_backward(const uint64_t* bits, float slope, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = (bits[i / 64] >> (i % 64)) & 1 ? dy[i] : slope * dy[i];
}

void RefBackend::channel_moments(const float* x, int64_t n, int64_t c, int64_t v, double* sum, double* sumsq) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch) {
      const float* p = x + (i * c + ch) * v;
      double s = 0, q = 0;
      for (int64_t j = 0; j < v; ++j) {
        s += p[j];
        q += double(p[j]) * p[j];
      }
      sum[ch] += s;
      sumsq[ch] += q;
    }
}

void RefBackend::channel_affine(const float* x, int64_t n, int64_t c, int64_t v, const float* scale,
                                const float* shift, float* y) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch) {
      const float* p = x + (i * c + ch) * v;
      float* q = y + (i * c + ch) * v;
      for (int64_t j = 0; j < v; ++j) q[j] = p[j] * scale[ch] + shift[ch];
    }
}

void RefBackend::channel_grad_moments(const float* x, const float* dy, int64_t n, int64_t c, int64_t v,
                                      const float* mean, double* sum_dy, double* sum_dy_xc) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch) {
      const float* p = x + (i * c + ch) * v;
      const float* g = dy + (i * c + ch) * v;
      double s = 0, q = 0;
      for (int64_t j = 0; j < v; ++j) {
        s += g[j];
        q += double(g[j]) * (double(p[j]) - mean[ch]);
      }
      sum_dy[ch] += s;
      sum_dy_xc[ch] += q;
    }
}

void RefBackend::channel_grad_apply(const float* x, const float* dy, int64_t n, int64_t c, int64_t v,
                                    const float* mean, const float* a, const float* b, const float* e,
                                    float* dx) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch) {
      const float* p = x + (i * c + ch) * v;
      const float* g = dy + (i * c + ch) * v;
      float* o = dx + (i * c + ch) * v;
      for (int64_t j = 0; j < v; ++j) o[j] = a[ch] * g[j] + b[ch] * (p[j] - mean[ch]) + e[ch];
    }
}

}  // namespace h3d
