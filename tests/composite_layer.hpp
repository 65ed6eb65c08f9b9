// Composite: layers run one after another as a single Layer, for tests of
// layers that only make sense together (a skip connection and its
// concatenation). Every activation is kept and nothing runs in place: the
// plain path, against which Network's memory plan is compared.
#pragma once
#include <memory>
#include <vector>

#include "hybrid3d/layers/layer.hpp"

namespace h3d::test {

class Composite : public Layer {
 public:
  explicit Composite(std::string name) : Layer(std::move(name)) {}
  void add(std::unique_ptr<Layer> l) { layers_.push_back(std::move(l)); }
  ActShape setup(const ActShape& in, const ProcessGrid& grid) override {
    ActShape s = in;
    for (auto& l : layers_) s = l->setup(s, grid);
    return s;
  }
  void forward(StepContext& ctx, const Tensor& x, Tensor& y) override {
    acts_.assign(layers_.size() + 1, Tensor());
    acts_[0] = x;
    for (size_t i = 0; i < layers_.size(); ++i) layers_[i]->forward(ctx, acts_[i], acts_[i + 1]);
    y = acts_.back();
  }
  void backward(StepContext& ctx, const Tensor&, const Tensor&, const Tensor& dy, Tensor& dx) override {
    Tensor g = dy;
    for (size_t i = layers_.size(); i-- > 0;) {
      Tensor d;
      layers_[i]->backward(ctx, acts_[i], acts_[i + 1], g, d);
      g = std::move(d);
    }
    dx = std::move(g);
  }
  std::vector<Param*> params() override {
    std::vector<Param*> out;
    for (auto& l : layers_)
      for (auto* p : l->params()) out.push_back(p);
    return out;
  }

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<Tensor> acts_;
};

}  // namespace h3d::test
