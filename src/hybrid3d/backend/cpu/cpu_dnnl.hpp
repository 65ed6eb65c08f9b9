// What the cpu backend's translation units share: the oneDNN engine and
// stream, error translation, and the staging of one primitive argument
// between the caller's plain NCDHW / OIDHW buffer and the layout the
// primitive chose (see cpu_conv.cpp).
#pragma once
#include <dnnl.hpp>
#include <optional>
#include <string>
#include <unordered_map>

#include "hybrid3d/backend/cpu/cpu_backend.hpp"
#include "hybrid3d/core/error.hpp"
#include "hybrid3d/core/tensor.hpp"

namespace h3d {

// oneDNN throws dnnl::error; turn it into our error with oneDNN's message.
template <typename F>
void dnnl_call(const char* what, F f) {
  try {
    f();
  } catch (const dnnl::error& e) {
    H3D_THROW(Error, "oneDNN " << what << " failed: " << e.what() << " (status " << int(e.status) << ")");
  }
}

// One argument of a primitive. When the layout the primitive wants differs
// from ours, the data goes through a staging buffer taken from the
// BufferPool (so the profiler counts it, and the next step reuses it).
// Each reorder is built on its first use, and only the one the argument
// needs: an input is only ever reordered in, an output out. (oneDNN's JIT
// reorder from a channel-padded blocked layout back to plain NCDHW takes
// half a second and 32 MiB of code for a 4-channel 130^3 input, which an
// input never needs.)
class StagedArg {
 public:
  StagedArg() = default;
  StagedArg(const dnnl::memory::desc& plain, const dnnl::memory::desc& wanted) : plain_(plain), wanted_(wanted) {}
  // Memory the primitive reads: the caller's buffer, or a staged copy of it.
  dnnl::memory input(const dnnl::engine& eng, dnnl::stream& s, const float* p);
  // Memory the primitive writes; finish_output() moves it to the caller's buffer.
  dnnl::memory output(const dnnl::engine& eng, float* p);
  void finish_output(dnnl::stream& s, dnnl::memory& written, float* p);
  bool staged() const { return plain_ != wanted_; }
  // Hands the staging buffer back to the pool.
  void release() { staging_.release(); }

 private:
  dnnl::memory::desc plain_, wanted_;
  std::optional<dnnl::reorder> to_wanted_, to_plain_;
  Tensor staging_;
};

struct CpuBackend::Impl {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  // A convolution's descriptors, and its primitives (kernels) built on
  // first use: a slab of backward weights never needs the forward kernel,
  // nor the first layer a backward-data one.
  struct ConvPrims {
    dnnl::convolution_forward::primitive_desc fwd_pd;
    dnnl::convolution_backward_data::primitive_desc bwd_data_pd;
    dnnl::convolution_backward_weights::primitive_desc bwd_weights_pd;
    std::optional<dnnl::convolution_forward> fwd_;
    std::optional<dnnl::convolution_backward_data> bwd_data_;
    std::optional<dnnl::convolution_backward_weights> bwd_weights_;
    dnnl::convolution_forward& fwd() { return fwd_ ? *fwd_ : fwd_.emplace(fwd_pd); }
    dnnl::convolution_backward_data& bwd_data() { return bwd_data_ ? *bwd_data_ : bwd_data_.emplace(bwd_data_pd); }
    dnnl::convolution_backward_weights& bwd_weights() {
      return bwd_weights_ ? *bwd_weights_ : bwd_weights_.emplace(bwd_weights_pd);
    }
    // forward: src, weights, dst; backward-data: diff_dst, weights, diff_src;
    // backward-weights: src, diff_dst, diff_weights (bias stays plain: 1-D).
    StagedArg f_src, f_wei, f_dst, d_ddst, d_wei, d_dsrc, w_src, w_ddst, w_dwei;
    // Each primitive's scratchpad (user mode: taken from the BufferPool for
    // the call, like the staging, instead of oneDNN's hidden global buffer
    // that keeps the largest size any primitive ever asked for).
    dnnl::memory::desc f_scratch, d_scratch, w_scratch;
    std::string forward_impl;  // oneDNN's name of the forward implementation
  };
  // Built on first use per shape (cpu_conv.cpp). `src_parent` and
  // `dst_parent` are the extents of the tensors the arguments are views of
  // (a slab along D reads planes of a larger NCDHW tensor); empty: dense.
  // `like`: the whole convolution a region of it is computed for; the
  // region takes its layouts and its forward implementation, so that each
  // output is computed as the whole convolution computes it.
  std::unordered_map<std::string, std::unique_ptr<ConvPrims>> convs;
  ConvPrims& conv(const ConvDesc& d, const std::array<int64_t, 3>& src_parent = {},
                  const std::array<int64_t, 3>& dst_parent = {}, const ConvPrims* like = nullptr);
};

}  // namespace h3d
