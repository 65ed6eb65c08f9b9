// CpuBackend: convolutions (cpu_conv.cpp) and matrix products on oneDNN (threads: OpenMP,
// set per rank by --threads), primitives built once per problem shape and
// cached (oneDNN's "build a descriptor, then execute" split). Pooling,
// pointwise and the bulk per-element kernels are OpenMP loops (cpu_pool.cpp,
// cpu_pointwise.cpp, cpu_elementwise.cpp); for the rest (per-channel
// reductions, box moves, the losses' and optimizers' loops) it calls a
// RefBackend it holds: composed, not inherited, so that every op it offers
// is one it chose.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>

#include "hybrid3d/backend/ref/ref_backend.hpp"

namespace h3d {

class CpuBackend : public Backend {
 public:
  CpuBackend();
  ~CpuBackend() override;
  std::string name() const override { return "cpu"; }
  void conv3d_forward(const ConvDesc& d, const float* x, const float* w, const float* b, float* y) override;
  void conv3d_forward_region(const ConvDesc& d, const float* x, const float* w, const float* b, float* y,
                             const Box& region) override;
  void conv3d_backward_data(const ConvDesc& d, const float* dy, const float* w, float* dx) override;
  void conv3d_backward_weights(const ConvDesc& d, const float* x, const float* dy, float* dw, float* db) override;
  std::vector<int64_t> conv3d_staging(const ConvDesc& d, ConvPass pass) override;
  void pool3d_forward(const PoolDesc& d, const float* x, float* y) override;
  void pool3d_backward(const PoolDesc& d, const float* x, const float* dy, float* dx) override;
  void pool3d_forward_argmax(const PoolDesc& d, const float* x, float* y, uint8_t* arg) override;
  void pool3d_backward_argmax(const PoolDesc& d, const uint8_t* arg, const float* dy, float* dx) override;
  void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
            const float* b, int64_t ldb, float beta, float* c, int64_t ldc) override;
  void activation_forward(ActKind kind, float param, const float* x, float* y, int64_t n) override;
  void activation_backward(ActKind kind, float param, const float* y, const float* dy, float* dx,
                           int64_t n) override;
  void sign_mask(const float* y, uint64_t* bits, int64_t n) override;
  void masked_slope_backward(const uint64_t* bits, float slope, const float* dy, float* dx, int64_t n) override;
  void channel_moments(const float* x, int64_t n, int64_t c, int64_t v, double* sum, double* sumsq) override;
  void channel_affine(const float* x, int64_t n, int64_t c, int64_t v, const float* scale, const float* shift,
                      float* y) override;
  void channel_grad_moments(const float* x, const float* dy, int64_t n, int64_t c, int64_t v, const float* mean,
                            double* sum_dy, double* sum_dy_xc) override;
  void channel_grad_apply(const float* x, const float* dy, int64_t n, int64_t c, int64_t v, const float* mean,
                          const float* a, const float* b, const float* e, float* dx) override;
  // cpu_elementwise.cpp
  void copy_box(const float* src, const Box& src_origin, float* dst, const Box& dst_origin, const Box& region,
                int64_t nc, CopyMode mode) override;
  void relayout_in_place(float* t, int64_t nc, const Box& from, const Box& to, const Box& region) override;
  void fill_outside(float* t, int64_t nc, const Box& origin, const Box& inner, float v) override;
  void fill(float* x, int64_t n, float v) override;
  void axpy(int64_t n, float alpha, const float* x, float* y) override;
  void add_bias_rows(int64_t rows, int64_t cols, const float* bias, float* y) override;
  void column_sums(int64_t rows, int64_t cols, const float* dy, float* db) override;
  void concat_samples(int64_t n, int64_t a_len, const float* a, int64_t b_len, const float* b, float* y) override;
  void split_samples(int64_t n, int64_t a_len, int64_t b_len, const float* y, float* a, float* b) override;
  void dropout(const DropoutDesc& d, const float* x, float* y) override;
  void sgd_update(const SgdStep& s, int64_t n, float* w, const float* grad, float* velocity) override;
  void adam_update(const AdamStep& s, int64_t n, float* w, const float* grad, float* m, float* v) override;
  bool all_finite(const float* x, int64_t n) override;
  double squared_error(int64_t n, const float* y, const float* t, double denom, float* dy, double* largest) override;
  void softmax_loss_sums(const SoftmaxLossDesc& d, const float* z, const int32_t* labels, int64_t v0, int64_t v1,
                         double* sums) override;
  void softmax_loss_grad(const SoftmaxLossDesc& d, const SoftmaxLossGrad& g, const float* z, const int32_t* labels,
                         float* dz) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  RefBackend ref_;  // the plain loops this backend composes
};

}  // namespace h3d
