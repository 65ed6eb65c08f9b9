// CPU per-element ops: OpenMP loops where the traffic is large (the
// residual and skip sums, fills, dropout, the optimizer updates and the
// gradients' finite check); the reference loops, composed, for the rest:
// per-channel reductions (in double, in a fixed order), the box moves, the
// dense head's small copies and the losses' per-voxel parts.
#include <xmmintrin.h>

#include <cmath>

#include "hybrid3d/backend/cpu/cpu_backend.hpp"
#include "hybrid3d/core/rng.hpp"

namespace h3d {

void CpuBackend::channel_moments(const float* x, int64_t n, int64_t c, int64_t v, double* sum, double* sumsq) {
  ref_.channel_moments(x, n, c, v, sum, sumsq);
}
void CpuBackend::channel_affine(const float* x, int64_t n, int64_t c, int64_t v, const float* scale, const float* shift,
                                float* y) {
  ref_.channel_affine(x, n, c, v, scale, shift, y);
}
void CpuBackend::channel_grad_moments(const float* x, const float* dy, int64_t n, int64_t c, int64_t v,
                                      const float* mean, double* sum_dy, double* sum_dy_xc) {
  ref_.channel_grad_moments(x, dy, n, c, v, mean, sum_dy, sum_dy_xc);
}
void CpuBackend::channel_grad_apply(const float* x, const float* dy, int64_t n, int64_t c, int64_t v, const float* mean,
                                    const float* a, const float* b, const float* e, float* dx) {
  ref_.channel_grad_apply(x, dy, n, c, v, mean, a, b, e, dx);
}

void CpuBackend::copy_box(const float* src, const Box& src_origin, float* dst, const Box& dst_origin, const Box& region,
                          int64_t nc, CopyMode mode) {
  ref_.copy_box(src, src_origin, dst, dst_origin, region, nc, mode);
}
void CpuBackend::relayout_in_place(float* t, int64_t nc, const Box& from, const Box& to, const Box& region) {
  ref_.relayout_in_place(t, nc, from, to, region);
}
void CpuBackend::fill_outside(float* t, int64_t nc, const Box& origin, const Box& inner, float v) {
  ref_.fill_outside(t, nc, origin, inner, v);
}

void CpuBackend::fill(float* x, int64_t n, float v) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] = v;
}

void CpuBackend::axpy(int64_t n, float alpha, const float* x, float* y) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void CpuBackend::add_bias_rows(int64_t rows, int64_t cols, const float* bias, float* y) {
  ref_.add_bias_rows(rows, cols, bias, y);
}
void CpuBackend::column_sums(int64_t rows, int64_t cols, const float* dy, float* db) {
  ref_.column_sums(rows, cols, dy, db);
}
void CpuBackend::concat_samples(int64_t n, int64_t a_len, const float* a, int64_t b_len, const float* b, float* y) {
  ref_.concat_samples(n, a_len, a, b_len, b, y);
}
void CpuBackend::split_samples(int64_t n, int64_t a_len, int64_t b_len, const float* y, float* a, float* b) {
  ref_.split_samples(n, a_len, b_len, y, a, b);
}

// Every element draws its own counter: the threads' split changes nothing.
void CpuBackend::dropout(const DropoutDesc& d, const float* x, float* y) {
  const float keep_scale = 1.0f / (1.0f - d.p);
  const int64_t per = d.per_sample, total = int64_t(d.sample_counter.size()) * per;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < total; ++k) {
    const bool keep = uniform01(d.seed, d.stream, d.counter(size_t(k / per), k % per)) >= double(d.p);
    y[k] = keep ? x[k] * keep_scale : 0.0f;
  }
}

namespace {

// Denormal floats flushed to zero (FTZ, DAZ) on this thread for a scope.
// Adam squares gradients: a weight whose gradient is 1e-21 (cosmoflow-lbann
// has many) makes a denormal second moment, and each denormal costs the
// CPU a microcode assist: the update ran 20x slower (0.3 s a step instead
// of 15 ms). Flushing changes v by less than 1e-38, which sqrt(v) + eps
// (eps 1e-8) cannot see.
class FlushDenormals {
 public:
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtzDaz); }
  ~FlushDenormals() { _mm_setcsr(saved_); }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  static constexpr unsigned kFtzDaz = 0x8040;
  unsigned saved_;
};

}  // namespace

// The updates on every thread: one pass over 4-5 arrays the size of the
// weights is memory-bound.
void CpuBackend::sgd_update(const SgdStep& s, int64_t n, float* w, const float* grad, float* velocity) {
#pragma omp parallel if (n > 65536)
  {
    const FlushDenormals flush;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) sgd_element(s, w[i], grad[i], velocity ? velocity + i : nullptr);
  }
}
void CpuBackend::adam_update(const AdamStep& s, int64_t n, float* w, const float* grad, float* m, float* v) {
#pragma omp parallel if (n > 65536)
  {
    const FlushDenormals flush;
#pragma omp for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) adam_element(s, w[i], grad[i], m[i], v[i]);
  }
}
bool CpuBackend::all_finite(const float* x, int64_t n) {
  int bad = 0;  // every gradient is checked every step: all threads, no early exit
#pragma omp parallel for reduction(| : bad) schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) bad |= !std::isfinite(x[i]);
  return !bad;
}
double CpuBackend::squared_error(int64_t n, const float* y, const float* t, double denom, float* dy, double* largest) {
  return ref_.squared_error(n, y, t, denom, dy, largest);
}
void CpuBackend::softmax_loss_sums(const SoftmaxLossDesc& d, const float* z, const int32_t* labels, int64_t v0,
                                   int64_t v1, double* sums) {
  ref_.softmax_loss_sums(d, z, labels, v0, v1, sums);
}
void CpuBackend::softmax_loss_grad(const SoftmaxLossDesc& d, const SoftmaxLossGrad& g, const float* z,
                                   const int32_t* labels, float* dz) {
  ref_.softmax_loss_grad(d, g, z, labels, dz);
}

}  // namespace h3d
