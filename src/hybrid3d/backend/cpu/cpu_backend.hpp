// CpuBackend: convolutions (cpu_conv.cpp) and matrix products on oneDNN (threads: OpenMP,
// set per rank by --threads), primitives built once per problem shape and
// cached (oneDNN's "build a descriptor, then execute" split). Pooling and
// pointwise kernels are OpenMP loops (cpu_pool.cpp, cpu_pointwise.cpp);
// per-channel kernels come from RefBackend.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>

#include "hybrid3d/backend/ref/ref_backend.hpp"

namespace h3d {

class CpuBackend : public RefBackend {
 public:
  CpuBackend();
  ~CpuBackend() override;
  std::string name() const override { return "cpu"; }
  void conv3d_forward(const ConvDesc& d, const float* x, const float* w, const float* b, float* y) override;
  void conv3d_forward_region(const ConvDesc& d, const float* x, const float* w, const float* b, float* y,
                             const Box& region) override;
  void conv3d_backward_data(const ConvDesc& d, const float* dy, const float* w, float* dx) override;
  void conv3d_backward_weights(const ConvDesc& d, const float* x, const float* dy, float* dw, float* db) override;
  void pool3d_forward(const PoolDesc& d, const float* x, float* y) override;
  void pool3d_backward(const PoolDesc& d, const float* x, const float* dy, float* dx) override;
  void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
            const float* b, int64_t ldb, float beta, float* c, int64_t ldc) override;
  void activation_forward(ActKind kind, float param, const float* x, float* y, int64_t n) override;
  void activation_backward(ActKind kind, float param, const float* y, const float* dy, float* dx,
                           int64_t n) override;
  void sign_mask(const float* y, uint64_t* bits, int64_t n) override;
  void masked_slope_backward(const uint64_t* bits, float slope, const float* dy, float* dx, int64_t n) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace h3d
