#include "hybrid3d/models/network.hpp"

#include <sstream>

#include "hybrid3d/core/error.hpp"

namespace h3d {

void Network::setup(const ActShape& input, const ProcessGrid& grid) {
  input_ = input;
  shapes_.clear();
  ActShape s = input;
  for (auto& l : layers_) {
    s = l->setup(s, grid);
    shapes_.push_back(s);
  }
  acts_.assign(layers_.size(), Tensor());
}

const Tensor& Network::forward(StepContext& ctx, const Tensor& x) {
  H3D_CHECK(!layers_.empty() && acts_.size() == layers_.size(), "Network::forward before setup");
  x_ = &x;
  const Tensor* in = &x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->forward(ctx, *in, acts_[i]);
    in = &acts_[i];
  }
  return acts_.back();
}

const Tensor& Network::backward(StepContext& ctx, const Tensor& dy) {
  H3D_CHECK(x_ != nullptr, "Network::backward before forward");
  const Tensor* g = &dy;
  int cur = 0;
  for (size_t j = layers_.size(); j-- > 0;) {
    const Tensor& in = j == 0 ? *x_ : acts_[j - 1];
    layers_[j]->backward(ctx, in, acts_[j], *g, grads_[cur]);
    g = &grads_[cur];
    cur ^= 1;
  }
  return *g;
}

std::vector<Param*> Network::params() {
  std::vector<Param*> out;
  for (auto& l : layers_)
    for (auto* p : l->params()) out.push_back(p);
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
  int64_t nparams = 0;
  for (auto& l : layers_)
    for (auto* p : const_cast<Layer&>(*l).params()) nparams += p->value.numel();
  os << layers_.size() << " layers, " << nparams << " parameters, input " << input_.channels << "x"
     << input_.dist.describe();
  return os.str();
}

}  // namespace h3d
