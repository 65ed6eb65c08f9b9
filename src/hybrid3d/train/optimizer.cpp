#include "hybrid3d/train/optimizer.hpp"

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

void restore_slot(const OptimizerState& s, const Param* p, const char* slot, std::vector<float>& dst) {
  const std::vector<float>* v = find_slot(s, p->name + "." + slot);
  if (!v) return;
  H3D_USAGE_CHECK(int64_t(v->size()) == p->value.numel(), "the checkpoint's optimizer state '" << p->name << "." << slot
                                                                                                << "' has the wrong size");
  dst = *v;
}

class Sgd : public Optimizer {
 public:
  explicit Sgd(OptimizerOptions o) : o_(o) {}
  void step(const std::vector<Param*>& params, double lr) override {
    for (auto* p : params) {
      if (o_.momentum == 0.0) {  // no momentum buffer (PyTorch keeps none either)
        for (int64_t i = 0; i < p->value.numel(); ++i)
          p->value[i] -= float(lr) * (p->grad[i] + float(o_.weight_decay) * p->value[i]);
        continue;
      }
      auto& v = velocity_[p];
      bool first = v.empty();
      if (first) v.assign(size_t(p->value.numel()), 0.0f);
      for (int64_t i = 0; i < p->value.numel(); ++i) {
        const float g = p->grad[i] + float(o_.weight_decay) * p->value[i];
        v[size_t(i)] = first ? g : float(o_.momentum) * v[size_t(i)] + g;
        p->value[i] -= float(lr) * v[size_t(i)];
      }
    }
    ++steps_;
  }
  OptimizerState state(const std::vector<Param*>& params) const override {
    OptimizerState s;
    s.steps = steps_;
    for (auto* p : params) {
      auto it = velocity_.find(p);
      if (it != velocity_.end() && !it->second.empty()) s.tensors.push_back({p->name + ".momentum_buffer", it->second});
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
  std::unordered_map<Param*, std::vector<float>> velocity_;
};

class Adam : public Optimizer {
 public:
  explicit Adam(OptimizerOptions o) : o_(o) {}
  void step(const std::vector<Param*>& params, double lr) override {
    ++t_;
    double c1 = 1.0 - std::pow(o_.beta1, double(t_)), c2 = 1.0 - std::pow(o_.beta2, double(t_));
    for (auto* p : params) {
      auto& st = state_[p];
      if (st.m.empty()) {
        st.m.assign(size_t(p->value.numel()), 0.0f);
        st.v.assign(size_t(p->value.numel()), 0.0f);
      }
      for (int64_t i = 0; i < p->value.numel(); ++i) {
        size_t k = size_t(i);
        float g = p->grad[i] + float(o_.weight_decay) * p->value[i];
        st.m[k] = float(o_.beta1) * st.m[k] + float(1 - o_.beta1) * g;
        st.v[k] = float(o_.beta2) * st.v[k] + float(1 - o_.beta2) * g * g;
        float denom = float(std::sqrt(double(st.v[k]) / c2) + o_.eps);
        p->value[i] -= float(lr / c1) * st.m[k] / denom;
      }
    }
  }
  OptimizerState state(const std::vector<Param*>& params) const override {
    OptimizerState s;
    s.steps = t_;
    for (auto* p : params) {
      auto it = state_.find(p);
      if (it == state_.end() || it->second.m.empty()) continue;
      s.tensors.push_back({p->name + ".exp_avg", it->second.m});
      s.tensors.push_back({p->name + ".exp_avg_sq", it->second.v});
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
    std::vector<float> m, v;
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
