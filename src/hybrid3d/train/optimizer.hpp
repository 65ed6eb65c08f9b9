// Optimizers, with PyTorch's update rules so that runs compare one to one:
//   SGD:  v = mu v + (g + wd p)   (v = g on the first step);  p -= lr v
//   Adam: m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//         p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
// Every rank applies the same update to the same (replicated) weights, or,
// with --shard-optimizer, each rank updates its shard of them
// (train/sharded_state.hpp): the optimizer steps over slices of parameters
// and holds slots the size of its slices. The update itself is a backend
// op (sgd_update, adam_update), and the slots are tensors from the
// backend's allocator.
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

// Elements [offset, offset + count) of a parameter's value, and their
// (reduced) gradient at `grad`. A rank updates at most one slice of each
// parameter.
struct ParamSlice {
  Param* param = nullptr;
  int64_t offset = 0, count = 0;
  const float* grad = nullptr;
};
// Every parameter whole, with its own gradient (the replicated update).
std::vector<ParamSlice> whole_params(const std::vector<Param*>& params);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step(Backend& backend, const std::vector<ParamSlice>& slices, double lr) = 0;
  // The slots of these slices, each the slice's size (a whole parameter's
  // for whole_params: what a checkpoint holds).
  virtual OptimizerState state(const std::vector<ParamSlice>& slices) const = 0;
  // Restores the slices' part of a whole state (one of state(whole_params));
  // a parameter without saved slots starts fresh.
  virtual void load_state(const std::vector<ParamSlice>& slices, const OptimizerState& whole) = 0;
  // The slot names per parameter (PyTorch's), what a checkpoint holds of each.
  virtual std::vector<std::string> slot_names() const = 0;
  int slots() const { return int(slot_names().size()); }
};

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& o);

}  // namespace h3d
