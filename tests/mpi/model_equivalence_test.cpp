// Distributed equals serial for whole models through the Trainer: loss,
// network output, every reduced weight gradient of the first step, and every
// weight after two SGD steps, under every layout of this world size.
#include <gtest/gtest.h>

#include <cstring>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/train/trainer.hpp"
#include "layouts.hpp"
#include "test_util.hpp"

using namespace h3d;

namespace {

struct Snapshot {
  Tensor loss{{2}}, output;
  std::vector<Tensor> grads, weights;
};

Snapshot two_steps(const Comm& comm, TrainOptions o) {
  Trainer t(comm, o);
  Snapshot s;
  s.loss[0] = float(t.train_step(0));
  s.output = t.last_output();
  for (auto* p : t.network().params()) s.grads.push_back(test::whole(t.grid(), *p, p->grad));
  s.loss[1] = float(t.train_step(1));
  for (auto* p : t.network().params()) s.weights.push_back(test::whole(t.grid(), *p, p->value));
  t.check_replicas_identical();
  return s;
}

bool same_bits(const Snapshot& a, const Snapshot& b) {
  if (!test::same_bits(a.loss, b.loss) || !test::same_bits(a.output, b.output) || a.grads.size() != b.grads.size()) return false;
  for (size_t i = 0; i < a.grads.size(); ++i)
    if (!test::same_bits(a.grads[i], b.grads[i]) || !test::same_bits(a.weights[i], b.weights[i])) return false;
  return true;
}

// Every layout that fits this world runs twice, with the halo overlap (and
// the communication thread) on and off: both equal the 1-rank run to 1e-5
// of scale, and each other bitwise. A world that none of the layouts fits is
// a reported skip (before the serial run), not a silent pass.
//
// second_step: also compare every weight after the second step. Max pooling
// makes that comparison fragile: an ulp-level difference between layouts can
// break a near-tie in a window the other way, and the gradient then goes to a
// different voxel (see docs/testing.md). The dropout model hits this on 3
// ranks with the current data, so for it only the first step is compared.
void expect_model_equivalent(const std::string& what, TrainOptions o, std::vector<std::array<int, 3>> layouts,
                             bool second_step = true) {
  Comm world = Comm::borrow(MPI_COMM_WORLD), self = Comm::borrow(MPI_COMM_SELF);
  o.quiet = true;
  o.batch_size = 2;
  o.train_samples = 4;
  o.val_samples = 0;
  o.optimizer.kind = "sgd";
  o.optimizer.momentum = 0.9;
  o.schedule.lr = 0.01;
  // Layouts that fit this world and leave no data group without a sample.
  std::vector<std::array<int, 3>> fitting;
  for (const auto& l : layouts) {
    const int spatial = l[0] * l[1] * l[2];
    if (world.size() % spatial == 0 && world.size() / spatial <= o.batch_size) fitting.push_back(l);
  }
  if (fitting.empty()) GTEST_SKIP() << what << ": none of its layouts fits " << world.size() << " ranks";
  Snapshot serial;
  if (world.rank() == 0) serial = two_steps(self, o);
  test::bcast_tensor(world, serial.loss);
  test::bcast_tensor(world, serial.output);
  size_t np = 0;
  if (world.rank() == 0) np = serial.grads.size();
  world.bcast(&np, sizeof np, 0);
  serial.grads.resize(np);
  serial.weights.resize(np);
  for (auto& g : serial.grads) test::bcast_tensor(world, g);
  for (auto& w : serial.weights) test::bcast_tensor(world, w);

  int ran = 0;
  for (const auto& layout : fitting) {
    Snapshot runs[2];
    for (int off = 0; off < 2; ++off) {
      std::string tag = what + " on " + test::name(layout) + " (" + std::to_string(world.size()) + " ranks, overlap " +
                        (off ? "off" : "on") + ")";
      o.spatial = layout;
      // Both gradient reductions: on the communication thread in small
      // buckets, and blocking after backward.
      o.allreduce_overlap = off ? Overlap::kOff : Overlap::kOn;
      o.halo_overlap = !off;
      o.bucket_mib = 0.05;
      Snapshot& d = runs[off];
      d = two_steps(world, o);
      ++ran;
      ProcessGrid grid(world, layout);
      int64_t lo = grid.group_index() * o.batch_size / grid.data_groups();
      int64_t hi = (grid.group_index() + 1) * o.batch_size / grid.data_groups();
      EXPECT_LT(test::rel_diff(d.loss, serial.loss), test::kTol) << tag << " loss";
      Tensor rows({hi - lo, 4});
      std::copy_n(serial.output.data() + lo * 4, rows.numel(), rows.data());
      EXPECT_LT(test::rel_diff(d.output, rows), test::kTol) << tag << " output";
      ASSERT_EQ(d.grads.size(), np);
      // Gradients that are zero in exact arithmetic (a conv bias right before
      // batch norm) are compared against 10% of the largest gradient instead.
      double gmax = 0;
      for (auto& g : serial.grads)
        for (int64_t k = 0; k < g.numel(); ++k) gmax = std::max(gmax, double(std::abs(g[k])));
      for (size_t i = 0; i < np; ++i) {
        EXPECT_LT(test::rel_diff(d.grads[i], serial.grads[i], 1e-1 * gmax), test::kTol) << tag << " gradient " << i;
        if (second_step)
          EXPECT_LT(test::rel_diff(d.weights[i], serial.weights[i]), test::kTol)
              << tag << " weight " << i << " after 2 steps";
      }
    }
    EXPECT_TRUE(same_bits(runs[0], runs[1])) << what << " on " << test::name(layout)
                                             << ": overlap on and off differ (loss, output, gradients or weights)";
  }
  EXPECT_EQ(ran, 2 * int(fitting.size()));
}

// cosmoflow at 32^3 (the smallest size), every layout of this world size.
void expect_cosmoflow32_equivalent(const std::string& what, int kernel, bool batchnorm, float dropout,
                                   bool second_step = true) {
  TrainOptions o;
  o.model.model = "cosmoflow";
  o.model.input_size = 32;
  o.model.kernel_size = kernel;
  o.model.batchnorm = batchnorm;
  o.model.dropout = dropout;
  expect_model_equivalent(what, o, test::layouts_for(Comm::borrow(MPI_COMM_WORLD).size()), second_step);
}

TEST(ModelEquivalence, CosmoflowReference) { expect_cosmoflow32_equivalent("cosmoflow k2", 2, false, 0.0f); }

TEST(ModelEquivalence, CosmoflowKernel3Batchnorm) {
  expect_cosmoflow32_equivalent("cosmoflow k3 bn", 3, true, 0.0f);
}

TEST(ModelEquivalence, CosmoflowDropoutFirstStep) {
  expect_cosmoflow32_equivalent("cosmoflow dropout", 2, false, 0.3f, false);
}

TEST(ModelEquivalence, CosmoflowLbann) {
  TrainOptions o;
  o.model.model = "cosmoflow-lbann";
  o.model.input_size = 128;
  // The 128^3 network is the expensive one: few layouts per world size.
  // (Its last layers are 2 voxels wide at 128^3: at most 2 ranks per dimension.)
  expect_model_equivalent("cosmoflow-lbann", o, {{2, 1, 1}, {1, 1, 2}, {2, 2, 1}, {2, 2, 2}});
}

TEST(ModelEquivalence, Resnet3d) {
  TrainOptions o;
  o.model.model = "resnet3d";
  o.model.input_size = 32;
  o.model.base_channels = 4;
  // Identity and projection shortcuts, batch norm everywhere. Block bounds
  // are aligned to 16: at 32^3 at most 2 ranks per dimension. The first step
  // only: the stem's max pooling breaks near-ties differently after one
  // step's rounding on some layouts (1e-3 in the first layers' weights
  // after step 2 on 1x2x2; with average pooling there instead, 1.1e-5).
  expect_model_equivalent("resnet3d", o, {{2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {2, 2, 1}, {1, 2, 2}, {2, 2, 2}}, false);
}

}  // namespace
