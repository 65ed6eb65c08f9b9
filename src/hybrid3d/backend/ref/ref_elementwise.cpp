// Reference per-element ops: the box moves (host_box_kernels' loops), the
// layers' copies and sums, dropout, the optimizer updates. Plain loops in
// element order; each states its maths in backend.hpp.
#include <cmath>
#include <cstring>

#include "hybrid3d/backend/ref/ref_backend.hpp"
#include "hybrid3d/core/rng.hpp"

namespace h3d {

void RefBackend::copy_box(const float* src, const Box& src_origin, float* dst, const Box& dst_origin, const Box& region,
                          int64_t nc, CopyMode mode) {
  host_box_kernels().copy_box(src, src_origin, dst, dst_origin, region, nc, mode);
}

void RefBackend::relayout_in_place(float* t, int64_t nc, const Box& from, const Box& to, const Box& region) {
  host_box_kernels().relayout_in_place(t, nc, from, to, region);
}

void RefBackend::fill_outside(float* t, int64_t nc, const Box& origin, const Box& inner, float v) {
  host_box_kernels().fill_outside(t, nc, origin, inner, v);
}

void RefBackend::fill(float* x, int64_t n, float v) {
  for (int64_t i = 0; i < n; ++i) x[i] = v;
}

void RefBackend::axpy(int64_t n, float alpha, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void RefBackend::add_bias_rows(int64_t rows, int64_t cols, const float* bias, float* y) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] += bias[c];
}

void RefBackend::column_sums(int64_t rows, int64_t cols, const float* dy, float* db) {
  for (int64_t c = 0; c < cols; ++c) {
    double s = 0;
    for (int64_t r = 0; r < rows; ++r) s += dy[r * cols + c];
    db[c] = float(s);
  }
}

void RefBackend::concat_samples(int64_t n, int64_t a_len, const float* a, int64_t b_len, const float* b, float* y) {
  for (int64_t s = 0; s < n; ++s) {
    std::memcpy(y + s * (a_len + b_len), a + s * a_len, size_t(a_len) * sizeof(float));
    std::memcpy(y + s * (a_len + b_len) + a_len, b + s * b_len, size_t(b_len) * sizeof(float));
  }
}

void RefBackend::split_samples(int64_t n, int64_t a_len, int64_t b_len, const float* y, float* a, float* b) {
  for (int64_t s = 0; s < n; ++s) {
    std::memcpy(a + s * a_len, y + s * (a_len + b_len), size_t(a_len) * sizeof(float));
    std::memcpy(b + s * b_len, y + s * (a_len + b_len) + a_len, size_t(b_len) * sizeof(float));
  }
}

void RefBackend::dropout(const DropoutDesc& d, const float* x, float* y) {
  const float keep_scale = 1.0f / (1.0f - d.p);
  for (size_t s = 0; s < d.sample_counter.size(); ++s)
    for (int64_t i = 0; i < d.per_sample; ++i) {
      const bool keep = uniform01(d.seed, d.stream, d.counter(s, i)) >= double(d.p);
      const int64_t k = int64_t(s) * d.per_sample + i;
      y[k] = keep ? x[k] * keep_scale : 0.0f;
    }
}

void RefBackend::sgd_update(const SgdStep& s, int64_t n, float* w, const float* grad, float* velocity) {
  for (int64_t i = 0; i < n; ++i) sgd_element(s, w[i], grad[i], velocity ? velocity + i : nullptr);
}

void RefBackend::adam_update(const AdamStep& s, int64_t n, float* w, const float* grad, float* m, float* v) {
  for (int64_t i = 0; i < n; ++i) adam_element(s, w[i], grad[i], m[i], v[i]);
}

bool RefBackend::all_finite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

}  // namespace h3d
