// Distributed equals serial for the whole unet3d (base width 2, 2 levels,
// 16^3, batch 2): output, cross-entropy + Dice loss, every reduced gradient
// of the first step, and every weight after two Adam steps, through
// Network's memory plan, under every layout of this world size (2x2x2
// included). Batch norm uses the global batch statistics, so every layout
// normalises over the same voxels.
#include <gtest/gtest.h>

#include "hybrid3d/backend/cpu/cpu_backend.hpp"
#include "hybrid3d/core/error.hpp"
#include "hybrid3d/core/rng.hpp"
#include "hybrid3d/models/unet3d.hpp"
#include "hybrid3d/train/grad_reducer.hpp"
#include "hybrid3d/train/optimizer.hpp"
#include "hybrid3d/train/seg_loss.hpp"
#include "layouts.hpp"
#include "test_util.hpp"

using namespace h3d;

namespace {

constexpr int64_t kBatch = 2, kSide = 16, kClasses = 3;
constexpr double kLr = 1e-3;
const std::array<int64_t, 3> kExtent{kSide, kSide, kSide};

// Labels as a function of global coordinates: a ball of class 1 holding a
// smaller ball of class 2 (per sample shifted), background 0.
std::vector<int32_t> labels_of(const Box& box, int64_t s0, int64_t n) {
  std::vector<int32_t> y;
  for (int64_t s = s0; s < s0 + n; ++s)
    for (int64_t z = box.r[0].lo; z < box.r[0].hi; ++z)
      for (int64_t h = box.r[1].lo; h < box.r[1].hi; ++h)
        for (int64_t w = box.r[2].lo; w < box.r[2].hi; ++w) {
          const double dz = double(z) - 7.5 - double(s), dh = double(h) - 8.0, dw = double(w) - 7.0 + double(s);
          const double r2 = dz * dz + dh * dh + dw * dw;
          y.push_back(r2 < 6.0 ? 2 : r2 < 36.0 ? 1 : 0);
        }
  return y;
}

struct Snapshot {
  Tensor losses{{2}}, output;
  std::vector<Tensor> grads, weights;
  std::vector<std::string> names;
  Box box;
  int64_t lo = 0, hi = 0;
};

Snapshot two_steps(const Comm& comm, std::array<int, 3> layout) {
  UNetOptions uo;
  uo.input_size = kSide;
  uo.base_channels = 2;
  uo.levels = 2;
  uo.classes = kClasses;
  uo.seed = 5;
  ProcessGrid grid(comm, layout);
  Network net = build_unet3d(uo);
  ActShape in;
  in.channels = 1;
  in.dist = Distribution::balanced(kExtent, grid.spatial(), unet3d_alignment(uo));
  net.setup(in, grid);
  Snapshot s;
  s.box = in.dist.box(grid.spatial_rank());
  s.lo = grid.group_index() * kBatch / grid.data_groups();
  s.hi = (grid.group_index() + 1) * kBatch / grid.data_groups();
  const std::vector<int32_t> labels = labels_of(s.box, s.lo, s.hi - s.lo);
  CpuBackend backend;
  GradientReducer reducer;
  reducer.plan(grid, net.params_by_layer(), 1 << 12, Overlap::kOn, 1);
  OptimizerOptions oo;
  oo.kind = "adam";
  auto opt = make_optimizer(oo);
  SegLossOptions lo;
  lo.kind = "ce+dice";
  for (int step = 0; step < 2; ++step) {
    StepContext ctx{&backend, &grid, true, 5, step, {}};
    for (int64_t p = s.lo; p < s.hi; ++p) ctx.batch_positions.push_back(p);
    Tensor x = test::global_random(3, s.hi - s.lo, 1, s.box, kExtent, s.lo);
    const Tensor& y = net.forward(ctx, std::move(x));
    if (step == 0) s.output = y;
    Tensor dy;
    s.losses[step] = float(segmentation_loss(grid.world(), lo, y, labels, dy).loss);
    net.backward(ctx, std::move(dy), [&](const std::vector<Param*>& ps) { reducer.ready(ps); });
    reducer.finish();
    if (step == 0)
      for (auto* p : net.params()) s.grads.push_back(p->grad);
    opt->step(net.params(), kLr);
  }
  for (auto* p : net.params()) s.weights.push_back(p->value), s.names.push_back(p->name);
  return s;
}

TEST(UNetEquivalence, EveryLayoutEqualsSerial) {
  Comm world = Comm::borrow(MPI_COMM_WORLD), self = Comm::borrow(MPI_COMM_SELF);
  Snapshot serial;
  if (world.rank() == 0) serial = two_steps(self, {1, 1, 1});
  test::bcast_tensor(world, serial.losses);
  test::bcast_tensor(world, serial.output);
  size_t np = serial.grads.size();
  world.bcast(&np, sizeof np, 0);
  serial.grads.resize(np);
  serial.weights.resize(np);
  for (auto& g : serial.grads) test::bcast_tensor(world, g);
  for (auto& w : serial.weights) test::bcast_tensor(world, w);
  ASSERT_GT(np, size_t(20));
  for (auto layout : test::layouts_for(world.size())) {
    const std::string tag = "unet3d on " + test::name(layout);
    Snapshot r;
    try {
      r = two_steps(world, layout);
    } catch (const UsageError& e) {
      if (world.rank() == 0) std::printf("[ refused  ] %s: %s\n", tag.c_str(), e.what());
      continue;
    }
    for (int i = 0; i < 2; ++i) EXPECT_NEAR(r.losses[i], serial.losses[i], 1e-5 * std::abs(serial.losses[i])) << tag;
    EXPECT_LT(test::rel_diff(r.output, test::block_of(serial.output, r.box, r.lo, r.hi - r.lo)), test::kTol) << tag;
    for (size_t i = 0; i < np; ++i) {
      EXPECT_LT(test::rel_diff(r.grads[i], serial.grads[i]), test::kTol) << tag << " gradient of " << r.names[i];
      // Adam moves every entry by about lr whatever its gradient, so an
      // entry whose gradient is a thousandth of its tensor's largest turns
      // that gradient's rounding (1e-6 relative) into 1e-3 of its step:
      // the weights are compared to 1e-5 of their scale plus 1% of one step.
      double diff = 0, scale = 0;
      for (int64_t k = 0; k < r.weights[i].numel(); ++k) {
        diff = std::max(diff, std::abs(double(r.weights[i][k]) - serial.weights[i][k]));
        scale = std::max(scale, std::abs(double(serial.weights[i][k])));
      }
      EXPECT_LE(diff, test::kTol * scale + 0.01 * kLr) << tag << " " << r.names[i];
    }
  }
}

}  // namespace
