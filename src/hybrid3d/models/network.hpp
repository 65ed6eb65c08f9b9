// Network: a chain of layers with its input shape. Keeps every layer's
// output of the last forward for backward (activation memory planning is a
// later step: see docs/roadmap.md).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "hybrid3d/layers/layer.hpp"

namespace h3d {

class Network {
 public:
  void add(std::unique_ptr<Layer> l) { layers_.push_back(std::move(l)); }
  // Validates every layer against the layout; throws UsageError naming the
  // first layer that cannot be split.
  void setup(const ActShape& input, const ProcessGrid& grid);
  const ActShape& input_shape() const { return input_; }
  const ActShape& output_shape() const { return shapes_.back(); }
  // The output of the last layer.
  const Tensor& forward(StepContext& ctx, const Tensor& x);
  // dy: gradient of the loss w.r.t. the output. Fills every Param::grad
  // (not yet reduced across ranks). Returns the gradient w.r.t. the input.
  const Tensor& backward(StepContext& ctx, const Tensor& dy);

  std::vector<Param*> params();
  std::vector<StateBuffer*> buffers();
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  std::string summary() const;

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
  ActShape input_;
  std::vector<ActShape> shapes_;  // output of each layer
  const Tensor* x_ = nullptr;
  std::vector<Tensor> acts_;
  Tensor grads_[2];  // ping-pong buffers for backward
};

}  // namespace h3d
