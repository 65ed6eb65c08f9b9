// Backend: every kernel that touches tensor memory, on local (per-rank)
// NCDHW buffers: convolutions, pooling, matrix products, activations, batch
// norm's per-channel parts, the box moves of the halo exchange
// (BoxKernels), and the per-element ops of the layers, losses and
// optimizers. It also names the allocator its buffers come from. Layers,
// tasks and optimizers never know which backend runs them; a backend never
// knows MPI exists. `ref` is plain loops with double accumulation (the
// oracle); `cpu` runs convolutions and matrix products on oneDNN and
// composes ref's kernels where a plain loop is all there is. The backends
// are listed in registry.cpp; docs/architecture.md says what a new one
// provides.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hybrid3d/backend/elementwise_desc.hpp"
#include "hybrid3d/core/allocator.hpp"
#include "hybrid3d/core/box.hpp"
#include "hybrid3d/core/box_kernels.hpp"

namespace h3d {

struct ConvDesc {
  int64_t n = 1, cin = 1, cout = 1;
  std::array<int64_t, 3> in{}, out{};  // local extents
  std::array<int, 3> k{1, 1, 1}, stride{1, 1, 1}, pad_lo{}, pad_hi{};
  bool bias = false;
  // > 0: a leaky ReLU of this slope applied by the forward to its own
  // output, y = y > 0 ? y : slope * y, bitwise as activation_forward
  // computes it: the network fuses it into the convolution
  // (Network::setup) to save a pass over the output. 0: none. The backward
  // passes ignore it (the activation layer still owns its gradient).
  float fused_leaky_slope = 0.0f;
  std::string key() const;
};

// The convolution that computes only the outputs in `region` (local output
// indices) of d: its input extents, the padding that falls inside it, and
// `in_origin`, the first input index it reads in each dimension.
ConvDesc sub_convolution(const ConvDesc& d, const Box& region, std::array<int64_t, 3>& in_origin);
// Copies the [nc] x box (origin, extents e) between a dense [nc, full]
// tensor and a dense [nc, e] one: out of the full one, or into it.
void copy_region(const float* src, float* dst, int64_t nc, const std::array<int64_t, 3>& full,
                 const std::array<int64_t, 3>& origin, const std::array<int64_t, 3>& e, bool into_full);

enum class PoolKind { kMax, kAvg };
// Average pooling divides by the full window volume (padding counts, as
// PyTorch's count_include_pad=True); max pooling ignores padding.
struct PoolDesc {
  PoolKind kind = PoolKind::kMax;
  int64_t n = 1, c = 1;
  std::array<int64_t, 3> in{}, out{};
  std::array<int, 3> k{2, 2, 2}, stride{2, 2, 2}, pad_lo{}, pad_hi{};
  // >= 0 (max pooling, backward): x is the output of a ReLU of this slope
  // (0: plain ReLU), whose gradient the pooling's backward applies to its
  // dx, bitwise as masked_slope_backward would after it: x > 0 ? dx :
  // slope * dx (Network::setup fuses them; the ReLU then keeps no mask and
  // makes no pass of its own). < 0: none.
  float relu_grad_slope = -1.0f;
};

enum class ActKind { kRelu, kLeakyRelu, kTanh, kScaledTanh, kScale };

enum class ConvPass { kForward, kBackwardData, kBackwardWeights };

class Backend : public BoxKernels {
 public:
  ~Backend() override = default;
  virtual std::string name() const = 0;
  // Where the tensors this backend's kernels read and write live.
  virtual Allocator& allocator() { return host_allocator(); }

  // y[n, cout, out] = conv(x[n, cin, in], w[cout, cin, k]) + b
  virtual void conv3d_forward(const ConvDesc& d, const float* x, const float* w, const float* b, float* y) = 0;
  // Only the outputs in `region` (local output indices) of y, which has d's
  // full output extents; the rest of y is left alone. Each output must come
  // out bitwise as conv3d_forward(d) computes it: the halo overlap computes
  // a layer region by region, and must give what the blocking path gives.
  // The default copies the input region out and the result back.
  virtual void conv3d_forward_region(const ConvDesc& d, const float* x, const float* w, const float* b, float* y,
                                     const Box& region);
  // dx[n, cin, in] = conv^T(dy, w)   (overwrites dx)
  virtual void conv3d_backward_data(const ConvDesc& d, const float* dy, const float* w, float* dx) = 0;
  // dw = sum over n and outputs of dy * x; db = sum of dy (overwrites; db may be null)
  virtual void conv3d_backward_weights(const ConvDesc& d, const float* x, const float* dy, float* dw, float* db) = 0;
  // The buffers (floats each) one call of `pass` on d takes from allocator()
  // for itself while it runs, all held together and given back when it
  // returns: copies of its arguments in the layout the kernel wants and the
  // kernel's scratchpad. The memory planner charges them
  // (plan/memory_model.hpp); with OpenMP's current thread count (scratchpads
  // grow with it). The default: none.
  virtual std::vector<int64_t> conv3d_staging(const ConvDesc& /*d*/, ConvPass /*pass*/) { return {}; }

  virtual void pool3d_forward(const PoolDesc& d, const float* x, float* y) = 0;
  // dx (overwritten) from x, dy (max pooling finds the first maximum again).
  // For max pooling whose windows tile the input (kernel = stride, no
  // padding, output * stride = input along each axis), dx may be x: each
  // window must be read before any of it is written.
  virtual void pool3d_backward(const PoolDesc& d, const float* x, const float* dy, float* dx) = 0;
  // Max pooling (d.kind kMax) that also records each output's place in its
  // window, so that backward needs neither x nor the pooling's input (the
  // first layer's stream never holds its convolution's output whole:
  // layers/conv_pool_stream.hpp). arg[o] = the window index (window order,
  // padding cells counted) of the first maximum, as pool3d_backward finds
  // it again, or kNoArg for a window of padding only; plus kArgPositive
  // where y[o] > 0. y is what pool3d_forward gives (a tie of -0 and +0 may
  // take the other zero). Windows of at most 127 cells.
  static constexpr uint8_t kArgPositive = 0x80, kNoArg = 0x7f;
  virtual void pool3d_forward_argmax(const PoolDesc& d, const float* x, float* y, uint8_t* arg) = 0;
  // dx (overwritten, d.in extents) from arg and dy: each output's dy added
  // to its recorded cell, then, where d.relu_grad_slope >= 0, the ReLU's
  // gradient by the recorded sign; the values pool3d_backward computes
  // from x.
  virtual void pool3d_backward_argmax(const PoolDesc& d, const uint8_t* arg, const float* dy, float* dx) = 0;

  // Row-major C[M, N] = alpha * op(A) op(B) + beta * C.
  virtual void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) = 0;

  // Pointwise activation y = f(x); `param` is the slope (leaky ReLU), or
  // the factor (scale, scaled tanh: y = param * tanh(x)).
  virtual void activation_forward(ActKind kind, float param, const float* x, float* y, int64_t n) = 0;
  // dx = f'(.) * dy, taken from the output y alone, so that x need not be
  // kept (and the forward may run in place).
  virtual void activation_backward(ActKind kind, float param, const float* y, const float* dy, float* dx,
                                   int64_t n) = 0;
  // bits[i / 64] bit i % 64 = (y[i] > 0): the ReLUs' gradient in 1/32 of
  // the output's memory. n need not be a multiple of 64.
  virtual void sign_mask(const float* y, uint64_t* bits, int64_t n) = 0;
  // dx = dy where the bit is set, slope * dy elsewhere; dx may be dy.
  virtual void masked_slope_backward(const uint64_t* bits, float slope, const float* dy, float* dx, int64_t n) = 0;

  // Per-channel sum and sum of squares over [n, c, v] (accumulated, in double).
  virtual void channel_moments(const float* x, int64_t n, int64_t c, int64_t v, double* sum, double* sumsq) = 0;
  // y = x * scale[c] + shift[c]
  virtual void channel_affine(const float* x, int64_t n, int64_t c, int64_t v, const float* scale, const float* shift,
                              float* y) = 0;
  // Per-channel sum(dy) and sum(dy * (x - mean)) (accumulated, in double).
  virtual void channel_grad_moments(const float* x, const float* dy, int64_t n, int64_t c, int64_t v, const float* mean,
                                    double* sum_dy, double* sum_dy_xc) = 0;
  // dx = a[c] * dy + b[c] * (x - mean[c]) + e[c]   (batch-norm backward, pre-reduced)
  virtual void channel_grad_apply(const float* x, const float* dy, int64_t n, int64_t c, int64_t v, const float* mean,
                                  const float* a, const float* b, const float* e, float* dx) = 0;

  // Per-element ops (elementwise_desc.hpp for the descs).
  virtual void fill(float* x, int64_t n, float v) = 0;
  // y += alpha * x
  virtual void axpy(int64_t n, float alpha, const float* x, float* y) = 0;
  // y[r, c] += bias[c] over rows x cols.
  virtual void add_bias_rows(int64_t rows, int64_t cols, const float* bias, float* y) = 0;
  // db[c] = sum over r of dy[r, c] (accumulated in double, in row order).
  virtual void column_sums(int64_t rows, int64_t cols, const float* dy, float* db) = 0;
  // Per sample s of n: y[s] = [a[s] (a_len floats), b[s] (b_len floats)]
  // (a channel concatenation), and its inverse.
  virtual void concat_samples(int64_t n, int64_t a_len, const float* a, int64_t b_len, const float* b, float* y) = 0;
  virtual void split_samples(int64_t n, int64_t a_len, int64_t b_len, const float* y, float* a, float* b) = 0;
  // y = mask * x / (1 - p); y may be x.
  virtual void dropout(const DropoutDesc& d, const float* x, float* y) = 0;
  // One optimizer step on n weights; velocity is null when momentum is 0.
  virtual void sgd_update(const SgdStep& s, int64_t n, float* w, const float* grad, float* velocity) = 0;
  virtual void adam_update(const AdamStep& s, int64_t n, float* w, const float* grad, float* m, float* v) = 0;
  virtual bool all_finite(const float* x, int64_t n) = 0;
  // Regression: returns sum (y - t)^2 (double, in order), writes
  // dy = 2 (y - t) / denom and *largest = max (y - t)^2.
  virtual double squared_error(int64_t n, const float* y, const float* t, double denom, float* dy, double* largest) = 0;
  // Softmax losses of one sample (SoftmaxLossDesc): adds each counted voxel
  // of [v0, v1) to sums[3K + 2], in voxel order: [0] w_y * -log p_y,
  // [1] w_y, [2 + k] p_k * g_k, [2 + K + k] p_k, [2 + 2K + k] g_k.
  virtual void softmax_loss_sums(const SoftmaxLossDesc& d, const float* z, const int32_t* labels, int64_t v0,
                                 int64_t v1, double* sums) = 0;
  // dz [K, volume] of one sample (0 for voxels that do not count).
  virtual void softmax_loss_grad(const SoftmaxLossDesc& d, const SoftmaxLossGrad& g, const float* z,
                                 const int32_t* labels, float* dz) = 0;
};

}  // namespace h3d
