#include "hybrid3d/models/network.hpp"

#include <algorithm>
#include <sstream>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/core/profiler.hpp"
#include "hybrid3d/layers/activation.hpp"
#include "hybrid3d/layers/conv3d.hpp"
#include "hybrid3d/layers/deterministic.hpp"

namespace h3d {

void Network::setup(const ActShape& input, const ProcessGrid& grid) {
  input_ = input;
  shapes_.clear();
  ActShape s = input;
  for (auto& l : layers_) {
    require_blocks_on_tiles(s, l->name());
    s = l->setup(s, grid);
    shapes_.push_back(s);
  }
  // Fusion: a leaky ReLU goes into the layer before it where that layer
  // can apply it (a convolution), saving a pass over its output.
  for (size_t i = 1; i < layers_.size(); ++i)
    if (auto* act = dynamic_cast<Activation*>(layers_[i].get()); act && act->absorbable())
      act->set_absorbed(layers_[i - 1]->absorb_leaky_relu(act->slope()));
  // And a ReLU's gradient goes into the layer after it where that layer's
  // backward can apply it (a max pooling reading the ReLU's output anyway),
  // saving the sign mask's pass in forward and the ReLU's pass in backward.
  for (size_t i = 0; i + 1 < layers_.size(); ++i)
    if (auto* act = dynamic_cast<Activation*>(layers_[i].get()); act && act->relu_grad_slope() >= 0.0f)
      act->set_grad_absorbed(layers_[i + 1]->absorb_relu_grad(act->relu_grad_slope()));
  acts_.assign(layers_.size(), Tensor());
  if (!layers_.empty()) layers_.front()->set_input_grad_needed(false);
  stream_first_layers(grid);
  fwd_names_.clear();
  bwd_names_.clear();
  for (auto& l : layers_) {
    fwd_names_.push_back(l->name() + ".forward");
    bwd_names_.push_back(l->name() + ".backward");
  }
}

void Network::stream_first_layers(const ProcessGrid& grid) {
  auto* conv = layers_.empty() ? nullptr : dynamic_cast<Conv3d*>(layers_[0].get());
  if (!conv) return;
  size_t j = 1;
  auto* act = j < layers_.size() ? dynamic_cast<Activation*>(layers_[j].get()) : nullptr;
  if (act) {
    if (!act->absorbed()) return;  // the convolution does not apply it
    ++j;
  }
  auto* pool = j < layers_.size() ? dynamic_cast<Pool3d*>(layers_[j].get()) : nullptr;
  if (!pool || !conv->stream_through(*pool, shapes_[j], grid.spatial_rank())) return;
  if (act) act->set_grad_absorbed(true);  // the stream applies its gradient from its own sign bits
  pool->set_pass_through();
}

bool Network::kept_for_backward(int64_t i) const {
  const int64_t L = int64_t(layers_.size());
  if (i >= 0 && layers_[size_t(i)]->backward_reads_output()) return true;
  return i + 1 < L && layers_[size_t(i + 1)]->backward_reads_input();
}

const Tensor& Network::forward(StepContext& ctx, Tensor x,
                               const std::function<void(int64_t layer, const Tensor& out)>& inspect) {
  H3D_CHECK(!layers_.empty() && acts_.size() == layers_.size(), "Network::forward before setup");
  const int64_t L = int64_t(layers_.size()), n = x.dim(0);
  x_ = std::move(x);
  if (inspect) inspect(-1, x_);
  for (int64_t i = 0; i < L; ++i) {
    Layer& l = *layers_[size_t(i)];
    Tensor &in = act(i - 1), &out = act(i);
    bool consume = !ctx.training || !kept_for_backward(i - 1);
    out.set_allocator(ctx.backend->allocator());  // activations live where the backend's kernels run
    if (!(consume && l.in_place())) {
      // Room for the next window layer to grow this output into its padded
      // copy, also through the in-place layers in between (conv-act-pool).
      int64_t wish = 0;
      for (int64_t j = i + 1; j < L; ++j) {
        wish = std::max(wish, layers_[size_t(j)]->input_capacity_wish(n));
        if (!layers_[size_t(j)]->in_place()) break;
      }
      out.reserve(wish);
    }
    ProfileScope timed(fwd_names_[size_t(i)].c_str());
    if (consume) {
      l.forward_consuming(ctx, in, out);
    } else {
      l.forward(ctx, in, out);
    }
    if (!ctx.training) l.release_saved();
    if (inspect) inspect(i, out);
  }
  return acts_.back();
}

void Network::backward(StepContext& ctx, Tensor dy, const std::function<void(const std::vector<Param*>&)>& grads_ready,
                       const std::function<void(const std::vector<Param*>&)>& grads_needed) {
  H3D_CHECK(!acts_.empty() && !acts_.back().empty(), "Network::backward before a training forward");
  Tensor g = std::move(dy), dx(ctx.backend->allocator());
  for (int64_t j = int64_t(layers_.size()) - 1; j >= 0; --j) {
    Layer& l = *layers_[size_t(j)];
    if (grads_needed) grads_needed(l.params());
    {
      ProfileScope timed(bwd_names_[size_t(j)].c_str());
      // The layer's input is dead after this backward unless the layer
      // before reads it (its output) in its own.
      if (j > 0 && !layers_[size_t(j - 1)]->backward_reads_output())
        l.backward_consuming_input(ctx, act(j - 1), act(j), g, dx);
      else
        l.backward_consuming(ctx, act(j - 1), act(j), g, dx);
      g = std::move(dx);
      act(j).release();
      l.release_saved();
    }
    if (grads_ready) grads_ready(l.params());
  }
  x_.release();
}

std::vector<Param*> Network::params() {
  std::vector<Param*> out;
  for (auto& l : layers_)
    for (auto* p : l->params()) out.push_back(p);
  return out;
}

std::vector<std::vector<Param*>> Network::params_by_layer() {
  std::vector<std::vector<Param*>> out;
  for (auto& l : layers_) out.push_back(l->params());
  return out;
}

std::vector<StateBuffer*> Network::buffers() {
  std::vector<StateBuffer*> out;
  for (auto& l : layers_)
    for (auto* b : l->buffers()) out.push_back(b);
  return out;
}

std::string Network::summary() const {
  std::ostringstream os;
  int64_t nparams = 0, in_parts = 0;
  std::string parts;
  for (auto& l : layers_)
    for (auto* p : const_cast<Layer&>(*l).params()) {
      nparams += p->whole_numel();
      if (!p->part) continue;
      in_parts += p->whole_numel();
      parts += (parts.empty() ? "" : ", ") + p->name;
    }
  os << layers_.size() << " layers, " << nparams << " parameters";
  if (in_parts > 0) os << " (" << in_parts << " of them held in parts, a block's columns per rank: " << parts << ")";
  os << ", input " << input_.channels << "x" << input_.dist.describe();
  return os.str();
}

int64_t Network::alignment() const {
  int64_t scale = 1, most = 1;
  for (const auto& l : layers_) {
    scale = scale * l->downsampling() / l->upsampling();
    most = std::max(most, scale);
  }
  return most;
}

}  // namespace h3d
