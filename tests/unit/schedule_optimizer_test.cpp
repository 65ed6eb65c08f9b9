// Learning-rate schedules and the optimizers' update rules (PyTorch's).
#include <gtest/gtest.h>

#include <cmath>

#include "hybrid3d/backend/ref/ref_backend.hpp"
#include "hybrid3d/train/lr_schedule.hpp"
#include "hybrid3d/train/optimizer.hpp"

using namespace h3d;

TEST(LrSchedule, MlperfAndPoly) {
  LrSchedule s;
  s.kind = "mlperf";
  s.lr = 1.0;
  s.warmup = 4;
  s.boundaries = {10, 20};
  s.factors = {0.25, 0.125};
  EXPECT_DOUBLE_EQ(s.at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.at(10), 0.25);
  EXPECT_DOUBLE_EQ(s.at(25), 0.125);
  s.kind = "poly";
  s.warmup = 0;
  s.total_steps = 10;
  s.power = 2;
  EXPECT_DOUBLE_EQ(s.at(0), 1.0);
  EXPECT_DOUBLE_EQ(s.at(5), 0.25);
}

TEST(Optimizers, SgdMomentumAndAdamByHand) {
  RefBackend ref;
  Param p{"w", Tensor({1}, 1.0f), Tensor({1}, 0.5f), GradReduce::kPartialSum};
  auto sgd = make_optimizer({"sgd", 0.9, 0.0});
  sgd->step(ref, whole_params({&p}), 0.1);  // v = 0.5
  EXPECT_FLOAT_EQ(p.value[0], 0.95f);
  sgd->step(ref, whole_params({&p}), 0.1);  // v = 0.9*0.5 + 0.5 = 0.95
  EXPECT_FLOAT_EQ(p.value[0], 0.95f - 0.095f);
  Param q{"w", Tensor({1}, 1.0f), Tensor({1}, 0.5f), GradReduce::kPartialSum};
  OptimizerOptions ao;
  ao.kind = "adam";
  auto adam = make_optimizer(ao);
  adam->step(ref, whole_params({&q}), 0.1);  // first Adam step moves by lr * sign(g) (up to eps)
  EXPECT_NEAR(q.value[0], 0.9f, 1e-6);
}

// --shard-optimizer: optimizers that each update a slice of the parameters
// (one per rank) give the same bits as one that updates them whole, and
// their slices of the state are the whole optimizer's state.
TEST(Optimizers, SlicesUpdateAsTheWhole) {
  RefBackend ref;
  for (const char* kind : {"sgd", "adam"}) {
    OptimizerOptions o;
    o.kind = kind;
    o.momentum = 0.9;
    o.weight_decay = 0.01;
    auto make = [](float scale) {
      Param p{"w", Tensor({37}), Tensor({37}), GradReduce::kPartialSum};
      for (int64_t i = 0; i < 37; ++i) p.value[i] = scale * float(i % 7) - 1.0f, p.grad[i] = float(i % 5) - 2.0f;
      return p;
    };
    Param whole = make(0.3f), cut = make(0.3f);
    auto one = make_optimizer(o);
    std::vector<std::unique_ptr<Optimizer>> ranks;
    ranks.push_back(make_optimizer(o));
    ranks.push_back(make_optimizer(o));
    const std::vector<ParamSlice> a{{&cut, 0, 16, cut.grad.data()}}, b{{&cut, 16, 21, cut.grad.data() + 16}};
    for (int step = 0; step < 3; ++step) {
      one->step(ref, whole_params({&whole}), 0.05);
      ranks[0]->step(ref, a, 0.05);
      ranks[1]->step(ref, b, 0.05);
    }
    for (int64_t i = 0; i < 37; ++i) ASSERT_EQ(whole.value[i], cut.value[i]) << kind << " element " << i;
    const OptimizerState w = one->state(whole_params({&whole})), sa = ranks[0]->state(a), sb = ranks[1]->state(b);
    ASSERT_EQ(w.tensors.size(), sa.tensors.size()) << kind;
    for (size_t k = 0; k < w.tensors.size(); ++k) {
      std::vector<float> joined = sa.tensors[k].second;
      joined.insert(joined.end(), sb.tensors[k].second.begin(), sb.tensors[k].second.end());
      EXPECT_EQ(joined, w.tensors[k].second) << kind << " " << w.tensors[k].first;
    }
    // A whole saved state loads into a slice: the slice's part of it.
    auto fresh = make_optimizer(o);
    fresh->load_state(b, w);
    const OptimizerState sf = fresh->state(b);
    for (size_t k = 0; k < w.tensors.size(); ++k) EXPECT_EQ(sf.tensors[k].second, sb.tensors[k].second) << kind;
  }
}
