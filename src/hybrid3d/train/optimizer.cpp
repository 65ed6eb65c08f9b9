#include "hybrid3d/train/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "hybrid3d/core/error.hpp"

namespace h3d {

namespace {

// The saved slot `name` of a parameter, or null.
const std::vector<float>* find_slot(const OptimizerState& s, const std::string& name) {
  for (const auto& t : s.tensors)
    if (t.first == name) return &t.second;
  return nullptr;
}

void restore_slot(const OptimizerState& s, const Param* p, const char* slot, Tensor& dst) {
  const std::vector<float>* v = find_slot(s, p->name + "." + slot);
  if (!v) return;
  H3D_USAGE_CHECK(int64_t(v->size()) == p->value.numel(), "the checkpoint's optimizer state '" << p->name << "." << slot
                                                                                                << "' has the wrong size");
  dst.set_allocator(p->value.allocator());
  dst.reshape_uninit({int64_t(v->size())});
  std::copy(v->begin(), v->end(), dst.data());
}

// A slot of p's size, zeroed, where p's value lives.
void start_slot(Backend& backend, const Param* p, Tensor& slot) {
  slot.set_allocator(p->value.allocator());
  slot.reshape_uninit(p->value.shape());
  backend.fill(slot.data(), slot.numel(), 0.0f);
}

class Sgd : public Optimizer {
 public:
  explicit Sgd(OptimizerOptions o) : o_(o) {}
  void step(Backend& backend, const std::vector<Param*>& params, double lr) override {
    SgdStep s;
    s.lr = float(lr);
    s.weight_decay = float(o_.weight_decay);
    s.momentum = float(o_.momentum);
    for (auto* p : params) {
      float* v = nullptr;  // no momentum buffer without momentum (PyTorch keeps none either)
      s.first = false;
      if (o_.momentum != 0.0) {
        Tensor& slot = velocity_[p];
        s.first = slot.empty();
        if (s.first) start_slot(backend, p, slot);
        v = slot.data();
      }
      backend.sgd_update(s, p->value.numel(), p->value.data(), p->grad.data(), v);
    }
    ++steps_;
  }
  OptimizerState state(const std::vector<Param*>& params) const override {
    OptimizerState s;
    s.steps = steps_;
    for (auto* p : params) {
      auto it = velocity_.find(p);
      if (it != velocity_.end() && !it->second.empty())
        s.tensors.push_back({p->name + ".momentum_buffer", it->second.to_vector()});
    }
    return s;
  }
  void load_state(const std::vector<Param*>& params, const OptimizerState& s) override {
    steps_ = s.steps;
    if (o_.momentum != 0.0)
      for (auto* p : params) restore_slot(s, p, "momentum_buffer", velocity_[p]);
  }
  int slots() const override { return o_.momentum != 0.0 ? 1 : 0; }

 private:
  OptimizerOptions o_;
  int64_t steps_ = 0;
  std::unordered_map<Param*, Tensor> velocity_;
};

class Adam : public Optimizer {
 public:
  explicit Adam(OptimizerOptions o) : o_(o) {}
  void step(Backend& backend, const std::vector<Param*>& params, double lr) override {
    ++t_;
    double c1 = 1.0 - std::pow(o_.beta1, double(t_)), c2 = 1.0 - std::pow(o_.beta2, double(t_));
    AdamStep s;
    s.beta1 = float(o_.beta1);
    s.one_minus_beta1 = float(1 - o_.beta1);
    s.beta2 = float(o_.beta2);
    s.one_minus_beta2 = float(1 - o_.beta2);
    s.weight_decay = float(o_.weight_decay);
    s.lr_over_c1 = float(lr / c1);
    s.c2 = c2;
    s.eps = o_.eps;
    for (auto* p : params) {
      auto& st = state_[p];
      if (st.m.empty()) {
        start_slot(backend, p, st.m);
        start_slot(backend, p, st.v);
      }
      backend.adam_update(s, p->value.numel(), p->value.data(), p->grad.data(), st.m.data(), st.v.data());
    }
  }
  OptimizerState state(const std::vector<Param*>& params) const override {
    OptimizerState s;
    s.steps = t_;
    for (auto* p : params) {
      auto it = state_.find(p);
      if (it == state_.end() || it->second.m.empty()) continue;
      s.tensors.push_back({p->name + ".exp_avg", it->second.m.to_vector()});
      s.tensors.push_back({p->name + ".exp_avg_sq", it->second.v.to_vector()});
    }
    return s;
  }
  int slots() const override { return 2; }
  void load_state(const std::vector<Param*>& params, const OptimizerState& s) override {
    t_ = s.steps;
    for (auto* p : params) {
      restore_slot(s, p, "exp_avg", state_[p].m);
      restore_slot(s, p, "exp_avg_sq", state_[p].v);
    }
  }

 private:
  struct State {
    Tensor m, v;
  };
  OptimizerOptions o_;
  int64_t t_ = 0;
  std::unordered_map<Param*, State> state_;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& o) {
  H3D_USAGE_CHECK(o.momentum >= 0 && o.momentum < 1, "--momentum " << o.momentum << " must be in [0, 1)");
  if (o.kind == "sgd") return std::make_unique<Sgd>(o);
  if (o.kind == "adam") return std::make_unique<Adam>(o);
  H3D_THROW(UsageError, "--optimizer '" << o.kind << "' is unknown; use sgd or adam");
}

}  // namespace h3d
