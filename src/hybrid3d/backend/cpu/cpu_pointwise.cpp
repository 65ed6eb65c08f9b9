// CPU pointwise kernels: threaded chunks, with the ReLUs (the bulk of the
// traffic in CosmoFlow) as branch-free loops the compiler vectorises; the
// rest defers to the reference loops per chunk.
#include <algorithm>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "hybrid3d/backend/cpu/cpu_backend.hpp"

namespace h3d {

namespace {
constexpr int64_t kChunk = 1 << 16;  // a multiple of 64: chunks own whole mask words

template <typename F>
void chunked(int64_t n, F f) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += kChunk) f(i, std::min(kChunk, n - i));
}
}  // namespace

void CpuBackend::activation_forward(ActKind kind, float p, const float* x, float* y, int64_t n) {
  if (kind == ActKind::kRelu || kind == ActKind::kLeakyRelu) {
    const float slope = kind == ActKind::kRelu ? 0.0f : p;
    chunked(n, [=](int64_t i0, int64_t m) {
      // Branch-free (the signs are random): max(v, 0) + slope * min(v, 0).
      for (int64_t i = i0; i < i0 + m; ++i) {
        const float v = x[i];
        y[i] = std::max(v, 0.0f) + slope * std::min(v, 0.0f);
      }
    });
    return;
  }
  chunked(n, [&](int64_t i0, int64_t m) { ref_.activation_forward(kind, p, x + i0, y + i0, m); });
}

void CpuBackend::activation_backward(ActKind kind, float p, const float* y, const float* dy, float* dx, int64_t n) {
  chunked(n, [&](int64_t i0, int64_t m) { ref_.activation_backward(kind, p, y + i0, dy + i0, dx + i0, m); });
}

void CpuBackend::sign_mask(const float* y, uint64_t* bits, int64_t n) {
  chunked(n, [=](int64_t i0, int64_t m) {
#ifdef __SSE2__
    // Four signs per compare + movemask; the tail goes to the reference loop.
    const int64_t whole = m / 64;
    const __m128 zero = _mm_setzero_ps();
    for (int64_t w = 0; w < whole; ++w) {
      const float* p = y + i0 + w * 64;
      uint64_t b = 0;
      for (int k = 0; k < 16; ++k) b |= uint64_t(_mm_movemask_ps(_mm_cmpgt_ps(_mm_loadu_ps(p + 4 * k), zero))) << (4 * k);
      bits[i0 / 64 + w] = b;
    }
    if (whole * 64 < m) ref_.sign_mask(y + i0 + whole * 64, bits + i0 / 64 + whole, m - whole * 64);
#else
    ref_.sign_mask(y + i0, bits + i0 / 64, m);
#endif
  });
}

void CpuBackend::masked_slope_backward(const uint64_t* bits, float slope, const float* dy, float* dx, int64_t n) {
  chunked(n, [=](int64_t i0, int64_t m) {
    const uint64_t* b = bits + i0 / 64;
    int64_t done = 0;
#ifdef __SSE2__
    // Four values per step: their four mask bits pick the factors from a
    // 16-entry table (1 where the bit is set, the slope elsewhere).
    alignas(16) float table[16][4];
    for (int nib = 0; nib < 16; ++nib)
      for (int j = 0; j < 4; ++j) table[nib][j] = (nib >> j) & 1 ? 1.0f : slope;
    const int64_t whole = m / 64;
    for (int64_t w = 0; w < whole; ++w) {
      const uint64_t word = b[w];
      const float* src = dy + i0 + w * 64;
      float* dst = dx + i0 + w * 64;
      for (int k = 0; k < 16; ++k)
        _mm_storeu_ps(dst + 4 * k, _mm_mul_ps(_mm_load_ps(table[(word >> (4 * k)) & 15]), _mm_loadu_ps(src + 4 * k)));
    }
    done = whole * 64;
#endif
    for (int64_t i = done; i < m; ++i) dx[i0 + i] = ((b[i / 64] >> (i % 64)) & 1 ? 1.0f : slope) * dy[i0 + i];
  });
}

}  // namespace h3d
