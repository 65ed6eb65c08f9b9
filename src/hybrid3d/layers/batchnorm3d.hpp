// BatchNorm3d over the whole global mini-batch: per channel c,
//   mean = sum(x)/M, var = sum(x^2)/M - mean^2 with M = batch * D*H*W,
// the sums taken over every block of every data group (one allreduce of
// 2C doubles per forward, one more per backward).
//   y = gamma * (x - mean) / sqrt(var + eps) + beta
// Running statistics as PyTorch: momentum 0.1, unbiased variance, eps 1e-5;
// evaluation uses them and needs no communication. gamma/beta gradients are
// complete (global) after the backward allreduce.
#pragma once
#include "hybrid3d/layers/layer.hpp"

namespace h3d {

class BatchNorm3d : public Layer {
 public:
  BatchNorm3d(std::string name, int64_t channels, double momentum = 0.1, double eps = 1e-5);
  ActShape setup(const ActShape& in, const ProcessGrid& grid) override;
  void forward(StepContext& ctx, const Tensor& x, Tensor& y) override;
  void backward(StepContext& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
  bool backward_reads_output() const override { return false; }
  std::vector<Param*> params() override { return {&gamma_, &beta_}; }
  std::vector<StateBuffer*> buffers() override { return {&running_mean_, &running_var_, &batches_}; }

 private:
  int64_t c_;
  double momentum_, eps_;
  int64_t global_volume_ = 0;
  Param gamma_, beta_;
  StateBuffer running_mean_, running_var_, batches_;
  std::vector<float> mean_, invstd_;  // of the last training forward
};

}  // namespace h3d
