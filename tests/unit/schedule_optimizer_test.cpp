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
  sgd->step(ref, {&p}, 0.1);  // v = 0.5
  EXPECT_FLOAT_EQ(p.value[0], 0.95f);
  sgd->step(ref, {&p}, 0.1);  // v = 0.9*0.5 + 0.5 = 0.95
  EXPECT_FLOAT_EQ(p.value[0], 0.95f - 0.095f);
  Param q{"w", Tensor({1}, 1.0f), Tensor({1}, 0.5f), GradReduce::kPartialSum};
  OptimizerOptions ao;
  ao.kind = "adam";
  auto adam = make_optimizer(ao);
  adam->step(ref, {&q}, 0.1);  // first Adam step moves by lr * sign(g) (up to eps)
  EXPECT_NEAR(q.value[0], 0.9f, 1e-6);
}
