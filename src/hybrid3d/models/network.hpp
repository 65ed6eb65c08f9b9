// Network: a chain of layers with its input shape, and the plan of which
// activations live how long.
//
// Memory plan: an activation is kept for backward only if a layer's backward
// reads it (Layer::backward_reads_input/output); otherwise the next layer
// consumes it: pointwise layers run in place, window layers grow it into
// their halo-padded copy (the producer reserves the capacity for that), and
// anything else frees it as soon as the next layer has read it. In backward
// each gradient is freed as soon as the layer below has used it, and every
// activation as soon as its layer's backward is done. The first layer's
// input gradient is not computed. Freed buffers go back to the BufferPool,
// so the next step reuses them without page faults.
#pragma once
#include <functional>
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
  // The output of the last layer. x is consumed. In inference
  // (ctx.training false) nothing is kept for backward. `inspect`, if set,
  // sees the input (layer -1) and each layer's output as it is made (the
  // non-finite diagnosis of Trainer).
  const Tensor& forward(StepContext& ctx, Tensor x,
                        const std::function<void(int64_t layer, const Tensor& out)>& inspect = {});
  // dy: gradient of the loss w.r.t. the output. Fills every Param::grad
  // (not yet reduced across ranks) and frees what forward kept. The
  // gradient w.r.t. the input is not computed. `grads_ready`, if set, is
  // called after each layer's backward with that layer's parameters (their
  // gradients are then final: the gradient reduction can start).
  // `grads_needed`, if set, is called before each layer's backward with its
  // parameters (whose gradient tensors may have been given back to the
  // pool, --shard-optimizer).
  void backward(StepContext& ctx, Tensor dy,
                const std::function<void(const std::vector<Param*>&)>& grads_ready = {},
                const std::function<void(const std::vector<Param*>&)>& grads_needed = {});

  // Floats the input tensor should hold so that the first layer can grow
  // it in place into its padded copy (reserve it before loading).
  int64_t input_capacity_wish(int64_t n) const { return layers_.empty() ? 0 : layers_[0]->input_capacity_wish(n); }

  std::vector<Param*> params();
  // params() grouped by layer (a layer without parameters: empty).
  std::vector<std::vector<Param*>> params_by_layer();
  std::vector<StateBuffer*> buffers();
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  // The multiple that every block bound of the input must be so that each
  // layer splits its blocks evenly: the largest product of the layers'
  // downsampling (over their upsampling) along the chain, e.g. 2^levels
  // for a U-Net. Known before setup(), which the input's distribution needs.
  int64_t alignment() const;
  std::string summary() const;

 private:
  // Fusion: the first convolution computes the average pooling after it
  // (through the leaky ReLU it absorbed) slab by slab, so that its own
  // output never exists whole (layers/conv_pool_stream.hpp).
  void stream_first_layers(const ProcessGrid& grid);
  // Whether backward reads the output of layer i (i = -1: the input).
  bool kept_for_backward(int64_t i) const;
  Tensor& act(int64_t i) { return i < 0 ? x_ : acts_[size_t(i)]; }

  std::vector<std::unique_ptr<Layer>> layers_;
  ActShape input_;
  std::vector<ActShape> shapes_;  // output of each layer
  Tensor x_;
  std::vector<Tensor> acts_;
  std::vector<std::string> fwd_names_, bwd_names_;  // profiler regions
};

}  // namespace h3d
