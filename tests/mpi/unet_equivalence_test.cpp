// Distributed equals serial for the whole unet3d (16^3, 24^3 on 3 ranks,
// batch 2): output, loss, every reduced gradient of the first step, and
// every weight after two steps, through Network's memory plan, under every
// layout of this world size (2x2x2 included), each with the halo overlap on
// and off, which must also agree bitwise. Batch norm uses the global batch
// statistics, so every layout normalises over the same voxels. A
// configuration whose every layout is refused fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

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

constexpr int64_t kBatch = 2, kClasses = 3;
// 16^3; on 3 ranks 24^3, so that 3 levels (blocks in multiples of 8) can be
// split in three.
int64_t side_for(int world) { return world == 3 ? 24 : 16; }

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

// One unet3d training configuration.
struct Config {
  std::string what;
  int64_t base_channels;
  int levels;
  std::string loss, optimizer;
  double lr;
  // PyTorch's default initialisation instead of the network's own: the
  // bound 1/sqrt(fan_in) with fan_in from the weight's dimension 1 (which,
  // for a transposed convolution, PyTorch takes to be the output channels).
  bool torch_init = false;
  // The volume as the cases: 0.8 * label + N(0, 0.3), so negative
  // in places; otherwise U(-1, 1).
  bool organ_input = false;
};

void torch_initialise(Network& net) {
  std::map<std::string, int64_t> fan_in;  // layer name -> fan-in of its weight
  for (auto* p : net.params())
    if (p->value.ndim() >= 2) fan_in[p->name.substr(0, p->name.rfind('.'))] = p->value.numel() / p->value.dim(0);
  for (auto* p : net.params()) {
    const std::string layer = p->name.substr(0, p->name.rfind('.'));
    if (layer.find(".bn") != std::string::npos) {  // BatchNorm3d: weight 1, bias 0
      p->value.fill(p->name.back() == 't' ? 1.0f : 0.0f);
      continue;
    }
    const double bound = 1.0 / std::sqrt(double(fan_in.at(layer)));
    for (int64_t i = 0; i < p->value.numel(); ++i)
      p->value[i] = float((2.0 * uniform01(77, fnv1a(p->name), uint64_t(i)) - 1.0) * bound);
  }
}

Snapshot two_steps(const Comm& comm, std::array<int, 3> layout, const Config& cfg, bool overlap) {
  UNetOptions uo;
  const int64_t side = side_for(Comm::borrow(MPI_COMM_WORLD).size());
  const std::array<int64_t, 3> extent{side, side, side};
  uo.input_size = side;
  uo.base_channels = cfg.base_channels;
  uo.levels = cfg.levels;
  uo.classes = kClasses;
  uo.seed = 5;
  ProcessGrid grid(comm, layout);
  Network net = build_unet3d(uo);
  ActShape in;
  in.channels = 1;
  in.dist = Distribution::balanced(extent, grid.spatial(), unet3d_alignment(uo));
  net.setup(in, grid);
  if (cfg.torch_init) torch_initialise(net);
  Snapshot s;
  s.box = in.dist.box(grid.spatial_rank());
  s.lo = grid.group_index() * kBatch / grid.data_groups();
  s.hi = (grid.group_index() + 1) * kBatch / grid.data_groups();
  const std::vector<int32_t> labels = labels_of(s.box, s.lo, s.hi - s.lo);
  CpuBackend backend;
  GradientReducer reducer;
  reducer.plan(grid, net.params_by_layer(), 1 << 12, Overlap::kOn, 1);
  OptimizerOptions oo;
  oo.kind = cfg.optimizer;
  auto opt = make_optimizer(oo);
  SegLossOptions lo;
  lo.kind = cfg.loss;
  for (int step = 0; step < 2; ++step) {
    StepContext ctx{&backend, &grid, true, 5, step, {}};
    ctx.overlap_halo = overlap;
    for (int64_t p = s.lo; p < s.hi; ++p) ctx.batch_positions.push_back(p);
    Tensor x = test::global_random(3, s.hi - s.lo, 1, s.box, extent, s.lo);
    if (cfg.organ_input) {
      // Noise as a pure function of the global position (the same on every layout).
      const Tensor u = test::global_random(4, s.hi - s.lo, 1, s.box, extent, s.lo);
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double z = std::sqrt(-2.0 * std::log(0.5 * (double(x[i]) + 1.0) + 1e-12)) * std::cos(M_PI * (double(u[i]) + 1.0));
        x[i] = float(0.8 * labels[size_t(i)] + 0.3 * z);
      }
    }
    const Tensor& y = net.forward(ctx, std::move(x));
    if (step == 0) s.output = y;
    Tensor dy;
    s.losses[step] = float(segmentation_loss(backend, grid.world(), lo, y, labels, dy).loss);
    net.backward(ctx, std::move(dy), [&](const std::vector<Param*>& ps) { reducer.ready(ps); });
    reducer.finish();
    if (step == 0)
      for (auto* p : net.params()) s.grads.push_back(p->grad);
    opt->step(backend, whole_params(net.params()), cfg.lr);
  }
  for (auto* p : net.params()) s.weights.push_back(p->value), s.names.push_back(p->name);
  return s;
}

void expect_every_layout_equals_serial(const Config& cfg) {
  Comm world = Comm::borrow(MPI_COMM_WORLD), self = Comm::borrow(MPI_COMM_SELF);
  Snapshot serial;
  if (world.rank() == 0) serial = two_steps(self, {1, 1, 1}, cfg, true);
  test::bcast_tensor(world, serial.losses);
  test::bcast_tensor(world, serial.output);
  size_t np = serial.grads.size();
  world.bcast(&np, sizeof np, 0);
  serial.grads.resize(np);
  serial.weights.resize(np);
  for (auto& g : serial.grads) test::bcast_tensor(world, g);
  for (auto& w : serial.weights) test::bcast_tensor(world, w);
  ASSERT_GT(np, size_t(20));
  int ran = 0, forward_bitwise = 0;
  for (auto layout : test::layouts_for(world.size())) {
    Snapshot runs[2];
    try {
      runs[0] = two_steps(world, layout, cfg, true);
      runs[1] = two_steps(world, layout, cfg, false);
    } catch (const UsageError& e) {
      if (world.rank() == 0) std::printf("[ refused  ] unet3d %s on %s: %s\n", cfg.what.c_str(), test::name(layout).c_str(), e.what());
      continue;
    }
    for (int off = 0; off < 2; ++off) {
      const Snapshot& r = runs[off];
      const std::string tag = "unet3d " + cfg.what + " on " + test::name(layout) + (off ? " overlap off" : " overlap on");
      ++ran;
      for (int i = 0; i < 2; ++i)
        EXPECT_NEAR(r.losses[i], serial.losses[i], 1e-5 * std::abs(serial.losses[i])) << tag;
      const Tensor mine = test::block_of(serial.output, r.box, r.lo, r.hi - r.lo);
      EXPECT_LT(test::rel_diff(r.output, mine), test::kTol) << tag;
      int64_t same = std::memcmp(r.output.data(), mine.data(), size_t(mine.numel()) * sizeof(float)) == 0;
      forward_bitwise += int(world.allreduce_sum(same) == world.size());
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
        EXPECT_LE(diff, test::kTol * scale + 0.01 * cfg.lr) << tag << " " << r.names[i];
      }
    }
    // The halo overlap changes when, not how, each output is computed.
    const std::string tag = "unet3d " + cfg.what + " on " + test::name(layout) + ": overlap on and off differ in ";
    EXPECT_TRUE(test::same_bits(runs[0].output, runs[1].output)) << tag << "the output";
    for (size_t i = 0; i < np; ++i) {
      EXPECT_TRUE(test::same_bits(runs[0].grads[i], runs[1].grads[i])) << tag << "the gradient of " << runs[0].names[i];
      EXPECT_TRUE(test::same_bits(runs[0].weights[i], runs[1].weights[i])) << tag << runs[0].names[i] << " after 2 steps";
    }
  }
  // A test whose every layout is refused checks nothing.
  EXPECT_GT(ran, 0) << "unet3d " << cfg.what << ": every layout of " << world.size() << " ranks was refused";
  if (world.rank() == 0)
    std::printf("[ checked  ] unet3d %s: %d runs against the 1-rank run, %d with the same output bits\n",
                cfg.what.c_str(), ran, forward_bitwise);
}

// Base width 2, 2 levels, cross-entropy + Dice, Adam.
TEST(UNetEquivalence, NarrowTwoLevels) {
  expect_every_layout_equals_serial({"base 2, 2 levels", 2, 2, "ce+dice", "adam", 1e-3});
}

// The case: base width 8 (channel counts oneDNN blocks), 3 levels
// (1^3 blocks at the bottom on 2x2x2), cross-entropy, SGD with momentum, on
// organ-like volumes of both signs; with the network's own initialisation
// and with PyTorch's.
TEST(UNetEquivalence, Base8ThreeLevels) {
  expect_every_layout_equals_serial({"base 8, 3 levels", 8, 3, "ce", "sgd", 1e-2, false, true});
}
TEST(UNetEquivalence, Base8ThreeLevelsTorchInit) {
  expect_every_layout_equals_serial({"base 8, 3 levels, PyTorch init", 8, 3, "ce", "sgd", 1e-2, true, true});
}

}  // namespace
