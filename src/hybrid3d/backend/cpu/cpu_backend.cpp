#include "hybrid3d/backend/cpu/cpu_backend.hpp"

#include "hybrid3d/backend/cpu/cpu_dnnl.hpp"

namespace h3d {

CpuBackend::CpuBackend() : impl_(std::make_unique<Impl>()) {}
CpuBackend::~CpuBackend() = default;

void CpuBackend::gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                      const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  H3D_CHECK(st == dnnl_success, "oneDNN sgemm failed with status " << int(st));
}

}  // namespace h3d
