// Skip connections inside a chain of layers (U-Net's encoder -> decoder
// links), without making the network a graph:
//   SkipSource   passes its input on unchanged and keeps a copy of it;
//   SkipConcat   later in the chain, appends the kept activation to its
//                input's channels: y = cat([x, kept], dim=1), as
//                torch.cat([up, skip], 1).
// In backward, SkipConcat splits dy: the first channels go down the chain,
// the rest waits in the link until SkipSource adds it to its own dy. Both
// activations must have the same distribution (the same blocks on every
// rank), so neither layer communicates.
//
// Memory: the kept copy lives from SkipSource's forward to SkipConcat's
// forward (concat does not need it in backward); the waiting gradient from
// SkipConcat's backward to SkipSource's.
#pragma once
#include <memory>

#include "hybrid3d/layers/layer.hpp"

namespace h3d {

struct SkipLink {
  ActShape shape;  // of the kept activation (set by SkipSource::setup)
  bool set_up = false;
  Tensor kept, grad;
};

class SkipSource : public Layer {
 public:
  SkipSource(std::string name, std::shared_ptr<SkipLink> link) : Layer(std::move(name)), link_(std::move(link)) {}
  ActShape setup(const ActShape& in, const ProcessGrid& grid) override;
  void forward(StepContext& ctx, const Tensor& x, Tensor& y) override;
  void forward_consuming(StepContext& ctx, Tensor& x, Tensor& y) override;
  void backward(StepContext& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
  void backward_consuming(StepContext& ctx, const Tensor& x, const Tensor& y, Tensor& dy, Tensor& dx) override;
  bool backward_reads_input() const override { return false; }
  bool backward_reads_output() const override { return false; }
  bool in_place() const override { return true; }

 private:
  std::shared_ptr<SkipLink> link_;
};

class SkipConcat : public Layer {
 public:
  SkipConcat(std::string name, std::shared_ptr<SkipLink> link) : Layer(std::move(name)), link_(std::move(link)) {}
  ActShape setup(const ActShape& in, const ProcessGrid& grid) override;
  void forward(StepContext& ctx, const Tensor& x, Tensor& y) override;
  void backward(StepContext& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
  bool backward_reads_input() const override { return false; }
  bool backward_reads_output() const override { return false; }

 private:
  std::shared_ptr<SkipLink> link_;
  int64_t c_in_ = 0, c_skip_ = 0, volume_ = 0;
};

}  // namespace h3d
