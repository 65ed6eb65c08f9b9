// DryBackend: a backend that computes nothing and whose tensors are address
// space that is never touched, so that the memory planner can run the real
// network, layer by layer, with the real memory plan, on a layout far larger
// than this machine: what its pool hands out is what the run would hold.
//
// It stands for a real backend (`real`): each convolution charges, while it
// runs, the staging buffers that backend's kernel would take
// (Backend::conv3d_staging), and the pool follows the host BufferPool's
// policy (reuse, trimming), so its peak is the real pool's.
//
// It also records the work the step asks for (StepWork), which the time
// model prices with a machine's rates (plan/time_model.hpp).
#pragma once
#include <array>
#include <map>
#include <string>
#include <tuple>

#include "hybrid3d/backend/backend.hpp"
#include "hybrid3d/core/buffer_pool.hpp"

namespace h3d {

// A convolution's shape class: rates differ with the channels and the
// window far more than with the extents.
struct ConvClass {
  int64_t cin = 0, cout = 0;
  int k = 0, stride = 0;
  bool operator<(const ConvClass& o) const {
    return std::tie(cin, cout, k, stride) < std::tie(o.cin, o.cout, o.k, o.stride);
  }
};

// The work of one replayed training step on one rank.
struct StepWork {
  // Floating-point operations per convolution class and pass.
  std::map<ConvClass, std::array<double, 3>> conv_flops;
  double gemm_flops = 0;
  // Bytes read and written by the memory-bound ops (pointwise, pooling,
  // batch norm, box copies, the optimizer update).
  double stream_bytes = 0;
  // Pooling's bytes apart (its backward scatters: far from streaming).
  double pool_bytes[2] = {0, 0};  // forward, backward
  // The largest whole convolution of each class and the largest pooling
  // (what --calibrate times).
  std::map<ConvClass, ConvDesc> largest;
  PoolDesc largest_pool;
};

class DryBackend : public Backend {
 public:
  explicit DryBackend(Backend& real) : real_(real), pool_(BufferPool::Backing::kAddressSpace) {}
  std::string name() const override { return "dry (" + real_.name() + ")"; }
  Allocator& allocator() override { return pool_; }
  BufferPool& pool() { return pool_; }

  void conv3d_forward(const ConvDesc& d, const float*, const float*, const float*, float*) override {
    charge(d, ConvPass::kForward);
    count(d, ConvPass::kForward, d.out[0] * d.out[1] * d.out[2]);
  }
  void conv3d_forward_region(const ConvDesc& d, const float*, const float*, const float*, float*,
                             const Box& region) override {
    charge(d, ConvPass::kForward);
    count(d, ConvPass::kForward, region.volume());
  }
  void conv3d_backward_data(const ConvDesc& d, const float*, const float*, float*) override {
    charge(d, ConvPass::kBackwardData);
    remember(d);
    count(d, ConvPass::kBackwardData, d.out[0] * d.out[1] * d.out[2]);
  }
  void conv3d_backward_weights(const ConvDesc& d, const float*, const float*, float*, float*) override {
    charge(d, ConvPass::kBackwardWeights);
    remember(d);
    count(d, ConvPass::kBackwardWeights, d.out[0] * d.out[1] * d.out[2]);
  }
  void pool3d_forward(const PoolDesc& d, const float*, float*) override {
    work_.pool_bytes[0] += 4.0 * double(d.n * d.c * (vol(d.in) + vol(d.out)));
    if (d.n * d.c * vol(d.in) > work_.largest_pool.n * work_.largest_pool.c * vol(work_.largest_pool.in))
      work_.largest_pool = d;
  }
  void pool3d_backward(const PoolDesc& d, const float*, const float*, float*) override {
    work_.pool_bytes[1] += 4.0 * double(d.n * d.c * (2 * vol(d.in) + vol(d.out)));
  }
  void pool3d_forward_argmax(const PoolDesc& d, const float* x, float* y, uint8_t*) override {
    pool3d_forward(d, x, y);
  }
  void pool3d_backward_argmax(const PoolDesc& d, const uint8_t*, const float* dy, float* dx) override {
    pool3d_backward(d, nullptr, dy, dx);
  }
  void gemm(bool, bool, int64_t m, int64_t n, int64_t k, float, const float*, int64_t, const float*, int64_t, float,
            float*, int64_t) override {
    work_.gemm_flops += 2.0 * double(m) * double(n) * double(k);
  }
  void activation_forward(ActKind, float, const float*, float*, int64_t n) override { stream(2 * n); }
  void activation_backward(ActKind, float, const float*, const float*, float*, int64_t n) override { stream(3 * n); }
  void sign_mask(const float*, uint64_t*, int64_t n) override { stream(n); }
  void masked_slope_backward(const uint64_t*, float, const float*, float*, int64_t n) override { stream(2 * n); }
  // The batch-norm sums are host arrays the layer reads: zeros.
  void channel_moments(const float*, int64_t n, int64_t c, int64_t v, double* sum, double* sumsq) override {
    std::fill(sum, sum + c, 0.0);
    std::fill(sumsq, sumsq + c, 0.0);
    stream(n * c * v);
  }
  void channel_affine(const float*, int64_t n, int64_t c, int64_t v, const float*, const float*, float*) override {
    stream(2 * n * c * v);
  }
  void channel_grad_moments(const float*, const float*, int64_t n, int64_t c, int64_t v, const float*, double* sum_dy,
                            double* sum_dy_xc) override {
    std::fill(sum_dy, sum_dy + c, 0.0);
    std::fill(sum_dy_xc, sum_dy_xc + c, 0.0);
    stream(2 * n * c * v);
  }
  void channel_grad_apply(const float*, const float*, int64_t n, int64_t c, int64_t v, const float*, const float*,
                          const float*, const float*, float*) override {
    stream(3 * n * c * v);
  }
  void copy_box(const float*, const Box&, float*, const Box&, const Box& region, int64_t nc, CopyMode) override {
    stream(2 * nc * region.volume());
  }
  void relayout_in_place(float*, int64_t nc, const Box&, const Box&, const Box& region) override {
    stream(2 * nc * region.volume());
  }
  void fill_outside(float*, int64_t, const Box&, const Box&, float) override {}
  void fill(float*, int64_t n, float) override { stream(n); }
  void axpy(int64_t n, float, const float*, float*) override { stream(3 * n); }
  void add_bias_rows(int64_t, int64_t, const float*, float*) override {}
  void column_sums(int64_t, int64_t, const float*, float*) override {}
  void concat_samples(int64_t, int64_t, const float*, int64_t, const float*, float*) override {}
  void split_samples(int64_t, int64_t, int64_t, const float*, float*, float*) override {}
  void dropout(const DropoutDesc& d, const float*, float*) override {
    stream(2 * d.per_sample * int64_t(d.sample_counter.size()));
  }
  void sgd_update(const SgdStep&, int64_t n, float*, const float*, float*) override { stream(5 * n); }
  void adam_update(const AdamStep&, int64_t n, float*, const float*, float*, float*) override { stream(7 * n); }
  bool all_finite(const float*, int64_t) override { return true; }
  double squared_error(int64_t, const float*, const float*, double, float*, double* largest) override {
    if (largest) *largest = 0.0;
    return 0.0;
  }
  void softmax_loss_sums(const SoftmaxLossDesc&, const float*, const int32_t*, int64_t, int64_t, double*) override {}
  void softmax_loss_grad(const SoftmaxLossDesc&, const SoftmaxLossGrad&, const float*, const int32_t*,
                         float*) override {}

  const StepWork& work() const { return work_; }
  void reset_work() { work_ = StepWork{}; }

 private:
  static int64_t vol(const std::array<int64_t, 3>& e) { return e[0] * e[1] * e[2]; }
  void stream(int64_t floats) { work_.stream_bytes += 4.0 * double(floats); }
  void count(const ConvDesc& d, ConvPass pass, int64_t outputs) {
    const ConvClass c{d.cin, d.cout, d.k[0], d.stride[0]};
    work_.conv_flops[c][size_t(pass)] +=
        2.0 * double(d.n) * double(outputs) * double(d.cin) * double(d.cout) * double(d.k[0] * d.k[1] * d.k[2]);
  }
  void remember(const ConvDesc& d) {
    ConvDesc& kept = work_.largest[ConvClass{d.cin, d.cout, d.k[0], d.stride[0]}];
    if (vol(d.out) * d.n > vol(kept.out) * kept.n) kept = d;
  }
  // Takes the real kernel's staging buffers together and gives them back.
  void charge(const ConvDesc& d, ConvPass pass) {
    std::vector<FloatBuffer> held;
    for (int64_t n : real_.conv3d_staging(d, pass)) held.push_back(pool_.take(size_t(n)));
    for (auto& b : held) pool_.give(std::move(b));
  }
  Backend& real_;
  BufferPool pool_;
  StepWork work_;
};

}  // namespace h3d
