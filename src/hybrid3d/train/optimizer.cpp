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

// The slice's part of a whole saved slot, if the state has it.
void restore_slot(const OptimizerState& s, const ParamSlice& sl, const char* slot, Tensor& dst) {
  const Param* p = sl.param;
  const std::vector<float>* v = find_slot(s, p->name + "." + slot);
  if (!v) return;
  H3D_USAGE_CHECK(int64_t(v->size()) == p->value.numel(), "the checkpoint's optimizer state '" << p->name << "." << slot
                                                                                                << "' has the wrong size");
  dst.set_allocator(p->value.allocator());
  dst.reshape_uninit({sl.count});
  std::copy(v->begin() + sl.offset, v->begin() + sl.offset + sl.count, dst.data());
}

// A slot of the slice's size, zeroed, where the parameter's value lives.
void start_slot(Backend& backend, const ParamSlice& sl, Tensor& slot) {
  slot.set_allocator(sl.param->value.allocator());
  slot.reshape_uninit({sl.count});
  backend.fill(slot.data(), slot.numel(), 0.0f);
}

float* value_of(const ParamSlice& sl) { return sl.param->value.data() + sl.offset; }

class Sgd : public Optimizer {
 public:
  explicit Sgd(OptimizerOptions o) : o_(o) {}
  void step(Backend& backend, const std::vector<ParamSlice>& slices, double lr) override {
    SgdStep s;
    s.lr = float(lr);
    s.weight_decay = float(o_.weight_decay);
    s.momentum = float(o_.momentum);
    for (const auto& sl : slices) {
      float* v = nullptr;  // no momentum buffer without momentum (PyTorch keeps none either)
      s.first = false;
      if (o_.momentum != 0.0) {
        Tensor& slot = velocity_[sl.param];
        s.first = slot.empty();
        if (s.first) start_slot(backend, sl, slot);
        v = slot.data();
      }
      backend.sgd_update(s, sl.count, value_of(sl), sl.grad, v);
    }
    ++steps_;
  }
  OptimizerState state(const std::vector<ParamSlice>& slices) const override {
    OptimizerState s;
    s.steps = steps_;
    for (const auto& sl : slices) {
      auto it = velocity_.find(sl.param);
      if (it != velocity_.end() && !it->second.empty())
        s.tensors.push_back({sl.param->name + ".momentum_buffer", it->second.to_vector()});
    }
    return s;
  }
  void load_state(const std::vector<ParamSlice>& slices, const OptimizerState& s) override {
    steps_ = s.steps;
    if (o_.momentum != 0.0)
      for (const auto& sl : slices) restore_slot(s, sl, "momentum_buffer", velocity_[sl.param]);
  }
  std::vector<std::string> slot_names() const override {
    return o_.momentum != 0.0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{};
  }

 private:
  OptimizerOptions o_;
  int64_t steps_ = 0;
  std::unordered_map<Param*, Tensor> velocity_;
};

class Adam : public Optimizer {
 public:
  explicit Adam(OptimizerOptions o) : o_(o) {}
  void step(Backend& backend, const std::vector<ParamSlice>& slices, double lr) override {
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
    for (const auto& sl : slices) {
      auto& st = state_[sl.param];
      if (st.m.empty()) {
        start_slot(backend, sl, st.m);
        start_slot(backend, sl, st.v);
      }
      backend.adam_update(s, sl.count, value_of(sl), sl.grad, st.m.data(), st.v.data());
    }
  }
  OptimizerState state(const std::vector<ParamSlice>& slices) const override {
    OptimizerState s;
    s.steps = t_;
    for (const auto& sl : slices) {
      auto it = state_.find(sl.param);
      if (it == state_.end() || it->second.m.empty()) continue;
      s.tensors.push_back({sl.param->name + ".exp_avg", it->second.m.to_vector()});
      s.tensors.push_back({sl.param->name + ".exp_avg_sq", it->second.v.to_vector()});
    }
    return s;
  }
  std::vector<std::string> slot_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  void load_state(const std::vector<ParamSlice>& slices, const OptimizerState& s) override {
    t_ = s.steps;
    for (const auto& sl : slices) {
      restore_slot(s, sl, "exp_avg", state_[sl.param].m);
      restore_slot(s, sl, "exp_avg_sq", state_[sl.param].v);
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

std::vector<ParamSlice> whole_params(const std::vector<Param*>& params) {
  std::vector<ParamSlice> out;
  out.reserve(params.size());
  for (auto* p : params) out.push_back({p, 0, p->value.numel(), p->grad.data()});
  return out;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& o) {
  H3D_USAGE_CHECK(o.momentum >= 0 && o.momentum < 1, "--momentum " << o.momentum << " must be in [0, 1)");
  if (o.kind == "sgd") return std::make_unique<Sgd>(o);
  if (o.kind == "adam") return std::make_unique<Adam>(o);
  H3D_THROW(UsageError, "--optimizer '" << o.kind << "' is unknown; use sgd or adam");
}

}  // namespace h3d
