// Optimizers, with PyTorch's update rules so that runs compare one to one:
//   SGD:  v = mu v + (g + wd p)   (v = g on the first step);  p -= lr v
//   Adam: m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//         p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
// Every rank applies the same update to the same (replicated) weights; the
// update itself is a backend op (sgd_update, adam_update), and the slots are
// tensors from the backend's allocator.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "hybrid3d/layers/layer.hpp"
#include "hybrid3d/train/optimizer_options.hpp"

namespace h3d {

// The state a checkpoint keeps: per parameter, named "<param>.<slot>"
// (PyTorch's slot names: momentum_buffer; exp_avg, exp_avg_sq), and the
// number of steps taken.
struct OptimizerState {
  std::vector<std::pair<std::string, std::vector<float>>> tensors;
  int64_t steps = 0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step(Backend& backend, const std::vector<Param*>& params, double lr) = 0;
  virtual OptimizerState state(const std::vector<Param*>& params) const = 0;
  // Restores state(); a parameter without saved slots starts fresh.
  virtual void load_state(const std::vector<Param*>& params, const OptimizerState& s) = 0;
  // Tensors of state per parameter (what a checkpoint of it holds).
  virtual int slots() const = 0;
};

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& o);

}  // namespace h3d
