// The regression task: MSE over the global mini-batch of 4 parameters per
// sample (train/task.hpp).
#include <cmath>
#include <cstdio>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/parallel/exact_sum.hpp"
#include "hybrid3d/train/task.hpp"

namespace h3d {

namespace {

constexpr int kP = SampleSource::kTargets;

class RegressionTask : public Task {
 public:
  RegressionTask(int64_t batch_size, bool deterministic) : batch_(batch_size), exact_(deterministic) {}

  void validate(const SampleSource& data) const override {
    H3D_USAGE_CHECK(data.classes() == 0, "the data (" << data.describe() << ") is for segmentation; "
                                                      << "use --model unet3d");
  }

  double loss(Backend& backend, const ProcessGrid& grid, const Tensor& output, const std::vector<float>& targets,
              Tensor& dout) override {
    // The head is replicated in each group, so summing over one rank per
    // group (the replicas communicator) is exact.
    const double denom = double(batch_) * kP;
    double largest = 0;
    dout.set_allocator(output.allocator());
    dout.reshape_like(output.shape());
    double sse = backend.squared_error(output.numel(), output.data(), targets.data(), denom, dout.data(), &largest);
    if (exact_) {  // the terms added exactly, whatever the groups
      const double bound = grid.world().allreduce_max(std::isfinite(sse) ? largest : HUGE_VAL) * denom;
      ExactSum sum(1, bound);
      for (int64_t i = 0; i < output.numel(); ++i) {
        const double d = double(output[i]) - targets[size_t(i)];
        sum.add(0, d * d);
      }
      sum.allreduce(grid.replicas());
      sse = sum.value(0);
    } else {
      grid.replicas().allreduce_sum(&sse, 1);
    }
    return sse / denom;
  }

  void eval_begin() override { acc_.assign(2 * kP + 1, 0.0); }

  void eval_add(const Tensor& y, const std::vector<float>& t, const std::vector<float>& weights) override {
    for (int64_t i = 0; i < y.numel(); ++i) {
      const double w = weights[size_t(i / kP)];
      const double d = double(y[i]) - t[size_t(i)];
      acc_[size_t(i % kP)] += w * d * d;
      acc_[size_t(kP + i % kP)] += w * std::abs(d);
    }
    for (float w : weights) acc_[2 * kP] += w;
  }

  ValidationResult eval_finish(const ProcessGrid& grid) override {
    grid.replicas().allreduce_sum(acc_.data(), int64_t(acc_.size()));
    ValidationResult r;
    r.samples = int64_t(acc_[2 * kP]);
    if (r.samples == 0) return r;
    for (int j = 0; j < kP; ++j) {
      r.mse_per_param[size_t(j)] = acc_[size_t(j)] / acc_[2 * kP];
      r.mae_per_param[size_t(j)] = acc_[size_t(kP + j)] / acc_[2 * kP];
      r.mse += r.mse_per_param[size_t(j)] / kP;
    }
    return r;
  }

  std::string report(const ValidationResult& v) const override {
    char buf[256];
    std::snprintf(buf, sizeof buf, "mse %.4f (per parameter %.4f %.4f %.4f %.4f), %lld samples", v.mse,
                  v.mse_per_param[0], v.mse_per_param[1], v.mse_per_param[2], v.mse_per_param[3],
                  (long long)v.samples);
    return buf;
  }

  nlohmann::json record(const ValidationResult& v) const override {
    return {{"mse", v.mse}, {"mse_per_param", v.mse_per_param}, {"mae_per_param", v.mae_per_param},
            {"samples", v.samples}};
  }

 private:
  int64_t batch_;  // global
  bool exact_;
  std::vector<double> acc_;  // sse[kP], sae[kP], weight
};

}  // namespace

std::unique_ptr<Task> make_regression_task(const TrainOptions& o) {
  return std::make_unique<RegressionTask>(o.batch_size, o.deterministic);
}

}  // namespace h3d
