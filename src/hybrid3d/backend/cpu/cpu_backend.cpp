#include "hybrid3d/backend/cpu/cpu_backend.hpp"

#include <dnnl.hpp>
#include <sstream>

#include "hybrid3d/core/error.hpp"

namespace h3d {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

namespace {

memory::dims dims5(int64_t n, int64_t c, const std::array<int64_t, 3>& e) { return {n, c, e[0], e[1], e[2]}; }
memory::dims dims3(const std::array<int, 3>& v) { return {v[0], v[1], v[2]}; }

// oneDNN throws dnnl::error; turn it into our error with oneDNN's message.
template <typename F>
void dnnl_call(const char* what, F f) {
  try {
    f();
  } catch (const dnnl::error& e) {
    H3D_THROW(Error, "oneDNN " << what << " failed: " << e.what() << " (status " << int(e.status) << ")");
  }
}

}  // namespace

std::string ConvDesc::key() const {
  std::ostringstream os;
  os << n << ',' << cin << ',' << cout << ',' << bias;
  for (int i = 0; i < 3; ++i)
    os << ';' << in[i] << ',' << out[i] << ',' << k[i] << ',' << stride[i] << ',' << pad_lo[i] << ',' << pad_hi[i];
  return os.str();
}

struct CpuBackend::Impl {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  struct ConvPrims {
    dnnl::convolution_forward::primitive_desc fwd_pd;
    dnnl::convolution_forward fwd;
    dnnl::convolution_backward_data bwd_data;
    dnnl::convolution_backward_weights bwd_weights;
  };
  std::unordered_map<std::string, ConvPrims> convs;

  ConvPrims& conv(const ConvDesc& d) {
    auto it = convs.find(d.key());
    if (it != convs.end()) return it->second;
    memory::desc src(dims5(d.n, d.cin, d.in), dt::f32, tag::ncdhw);
    memory::desc dst(dims5(d.n, d.cout, d.out), dt::f32, tag::ncdhw);
    memory::desc wei({d.cout, d.cin, d.k[0], d.k[1], d.k[2]}, dt::f32, tag::oidhw);
    memory::desc bia({d.cout}, dt::f32, tag::x);
    memory::desc no_bias;
    auto st = dims3(d.stride), pl = dims3(d.pad_lo), pr = dims3(d.pad_hi);
    ConvPrims p;
    dnnl_call("convolution setup", [&] {
      dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                         src, wei, d.bias ? bia : no_bias, dst, st, pl, pr);
      p.fwd_pd = dnnl::convolution_forward::primitive_desc(fd, eng);
      p.fwd = dnnl::convolution_forward(p.fwd_pd);
      dnnl::convolution_backward_data::desc bd(dnnl::algorithm::convolution_direct, src, wei, dst, st, pl, pr);
      p.bwd_data = dnnl::convolution_backward_data(
          dnnl::convolution_backward_data::primitive_desc(bd, eng, p.fwd_pd));
      dnnl::convolution_backward_weights::desc wd(dnnl::algorithm::convolution_direct, src, wei,
                                                  d.bias ? bia : no_bias, dst, st, pl, pr);
      p.bwd_weights = dnnl::convolution_backward_weights(
          dnnl::convolution_backward_weights::primitive_desc(wd, eng, p.fwd_pd));
    });
    return convs.emplace(d.key(), std::move(p)).first->second;
  }
  memory mem(const memory::dims& dims, tag t, const float* p) {
    return memory({dims, dt::f32, t}, eng, const_cast<float*>(p));
  }
};

CpuBackend::CpuBackend() : impl_(std::make_unique<Impl>()) {}
CpuBackend::~CpuBackend() = default;

void CpuBackend::conv3d_forward(const ConvDesc& d, const float* x, const float* w, const float* b, float* y) {
  auto& p = impl_->conv(d);
  dnnl_call("convolution forward", [&] {
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, impl_->mem(dims5(d.n, d.cin, d.in), tag::ncdhw, x)},
        {DNNL_ARG_WEIGHTS, impl_->mem({d.cout, d.cin, d.k[0], d.k[1], d.k[2]}, tag::oidhw, w)},
        {DNNL_ARG_DST, impl_->mem(dims5(d.n, d.cout, d.out), tag::ncdhw, y)}};
    if (d.bias) args.emplace(DNNL_ARG_BIAS, impl_->mem({d.cout}, tag::x, b));
    p.fwd.execute(impl_->strm, args);
    impl_->strm.wait();
  });
}

void CpuBackend::conv3d_backward_data(const ConvDesc& d, const float* dy, const float* w, float* dx) {
  auto& p = impl_->conv(d);
  dnnl_call("convolution backward data", [&] {
    p.bwd_data.execute(impl_->strm,
                       {{DNNL_ARG_DIFF_DST, impl_->mem(dims5(d.n, d.cout, d.out), tag::ncdhw, dy)},
                        {DNNL_ARG_WEIGHTS, impl_->mem({d.cout, d.cin, d.k[0], d.k[1], d.k[2]}, tag::oidhw, w)},
                        {DNNL_ARG_DIFF_SRC, impl_->mem(dims5(d.n, d.cin, d.in), tag::ncdhw, dx)}});
    impl_->strm.wait();
  });
}

void CpuBackend::conv3d_backward_weights(const ConvDesc& d, const float* x, const float* dy, float* dw,
                                         float* db) {
  auto& p = impl_->conv(d);
  std::vector<float> scratch_bias;
  if (d.bias && !db) {
    scratch_bias.resize(size_t(d.cout));
    db = scratch_bias.data();
  }
  dnnl_call("convolution backward weights", [&] {
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, impl_->mem(dims5(d.n, d.cin, d.in), tag::ncdhw, x)},
        {DNNL_ARG_DIFF_DST, impl_->mem(dims5(d.n, d.cout, d.out), tag::ncdhw, dy)},
        {DNNL_ARG_DIFF_WEIGHTS, impl_->mem({d.cout, d.cin, d.k[0], d.k[1], d.k[2]}, tag::oidhw, dw)}};
    if (d.bias) args.emplace(DNNL_ARG_DIFF_BIAS, impl_->mem({d.cout}, tag::x, db));
    p.bwd_weights.execute(impl_->strm, args);
    impl_->strm.wait();
  });
  if (!d.bias && db)
    for (int64_t co = 0; co < d.cout; ++co) db[co] = 0.0f;
}

void CpuBackend::gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                      const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  H3D_CHECK(st == dnnl_success, "oneDNN sgemm failed with status " << int(st));
}

}  // namespace h3d
