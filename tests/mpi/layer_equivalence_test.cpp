// Distributed equals serial, layer by layer: forward output, input gradient
// and (reduced) parameter gradients of every layer under every layout of this
// world size, against the same layer run on one rank with the whole batch.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>

#include "hybrid3d/backend/cpu/cpu_backend.hpp"
#include "hybrid3d/core/error.hpp"
#include "hybrid3d/layers/activation.hpp"
#include "hybrid3d/layers/batchnorm3d.hpp"
#include "hybrid3d/layers/conv3d.hpp"
#include "hybrid3d/layers/conv_transpose3d.hpp"
#include "hybrid3d/layers/dropout.hpp"
#include "hybrid3d/layers/linear.hpp"
#include "hybrid3d/layers/pool3d.hpp"
#include "hybrid3d/layers/skip.hpp"
#include "composite_layer.hpp"
#include "hybrid3d/train/grad_reducer.hpp"
#include "layouts.hpp"
#include "test_util.hpp"

using namespace h3d;

namespace {

constexpr int64_t kBatch = 2, kChannels = 3;
const std::array<int64_t, 3> kExtent{8, 6, 10};
// Every layer also runs on smaller volumes, so that the layouts of each
// world size give blocks 1, 2, 3 and 4 voxels wide along each of D, H and W
// (2x2x2 on 2x3x4: 1, 1-2, 2; 1x4x1 on 4x8x6: 2 along H; 3x1x1 on 4x8x6: 1-2).
const std::vector<std::array<int64_t, 3>> kExtents{kExtent, {4, 8, 6}, {2, 3, 4}};

struct Result {
  Tensor y, dx;
  std::vector<Tensor> grads;
  int64_t lo = 0, hi = 0;  // this rank's samples of the batch
  Box in_box, out_box;     // this rank's blocks of the input and (spatial) output
  ActShape out;
};

using Factory = std::function<std::unique_ptr<Layer>()>;

// Runs one forward/backward of a fresh layer on `comm` with `layout`;
// returns this rank's blocks. Throws UsageError if the layout cannot split it.
// `align`: block bounds at multiples of it where the extent allows.
// `overlap`: halo exchange behind the interior (StepContext::overlap_halo).
Result run(const Factory& make, const Comm& comm, std::array<int, 3> layout, const std::array<int64_t, 3>& extent,
           bool overlap, int64_t align = 1) {
  ProcessGrid grid(comm, layout);
  auto layer = make();
  ActShape in;
  in.channels = kChannels;
  in.dist = Distribution::balanced(extent, layout, align);
  Result r;
  r.out = layer->setup(in, grid);
  const ActShape& out = r.out;
  const int64_t lo = r.lo = grid.group_index() * kBatch / grid.data_groups();
  const int64_t hi = r.hi = (grid.group_index() + 1) * kBatch / grid.data_groups();
  r.in_box = in.dist.box(grid.spatial_rank());
  if (out.spatial) r.out_box = out.dist.box(grid.spatial_rank());
  Tensor x = test::global_random(1, hi - lo, kChannels, r.in_box, extent, lo);
  CpuBackend backend;
  StepContext ctx{&backend, &grid, true, 99, 5, {}};
  ctx.overlap_halo = overlap;
  for (int64_t p = lo; p < hi; ++p) ctx.batch_positions.push_back(p);
  layer->forward(ctx, x, r.y);
  Tensor dy;
  if (out.spatial) {
    dy = test::global_random(2, hi - lo, out.channels, r.out_box, out.dist.extent(), lo);
  } else {
    dy.resize({hi - lo, out.features});
    for (int64_t i = 0; i < dy.numel(); ++i) dy[i] = float(0.01 * double((i + lo * out.features) % 17) - 0.08);
  }
  layer->backward(ctx, x, r.y, dy, r.dx);
  // Small buckets on the communication thread: several per layer.
  GradientReducer red;
  red.plan(grid, {layer->params()}, 256, Overlap::kOn, 1);
  red.ready(layer->params());
  red.finish();
  for (auto* p : layer->params()) r.grads.push_back(test::whole(grid, *p, p->grad));
  return r;
}

// Under every layout of this world size, with the halo overlap on and off,
// on each volume (the default one only with `all_extents` false): the
// forward output, input gradient and reduced parameter gradients equal the
// 1-rank run's to 1e-5 of their scale, and overlap on and off give the same
// bits. Fails if no layout could split the layer.
void expect_equivalent(const std::string& what, const Factory& make, int64_t align = 1, bool all_extents = true) {
  Comm world = Comm::borrow(MPI_COMM_WORLD);
  Comm self = Comm::borrow(MPI_COMM_SELF);
  const size_t np = make()->params().size();
  int ran = 0, compared = 0;
  for (const auto& extent : kExtents) {
    if (!all_extents && extent != kExtent) continue;
    const std::string vol = std::to_string(extent[0]) + "x" + std::to_string(extent[1]) + "x" + std::to_string(extent[2]);
    Result serial;
    int32_t fits = 1;  // a volume too small for the layer (a valid k3 conv on 2 voxels) is refused on 1 rank too
    if (world.rank() == 0) try {
        serial = run(make, self, {1, 1, 1}, extent, true);
      } catch (const UsageError& e) {
        std::printf("[ refused  ] %s on %s (1 rank): %s\n", what.c_str(), vol.c_str(), e.what());
        fits = 0;
      }
    world.bcast(&fits, sizeof fits, 0);
    if (!fits) continue;
    test::bcast_tensor(world, serial.y);
    test::bcast_tensor(world, serial.dx);
    serial.grads.resize(np);
    for (auto& g : serial.grads) test::bcast_tensor(world, g);
    for (auto layout : test::layouts_for(world.size())) {
      std::string tag = what + " on " + vol + " split " + test::name(layout) + " (" + std::to_string(world.size()) +
                        " ranks)";
      Result on, off;
      try {
        on = run(make, world, layout, extent, true, align);
        off = run(make, world, layout, extent, false, align);
      } catch (const UsageError& e) {
        // Every rank refuses the same layout before any communication.
        if (world.rank() == 0) std::printf("[ refused  ] %s: %s\n", tag.c_str(), e.what());
        continue;
      }
      ++ran;
      for (const Result* r : {&on, &off}) {
        const std::string t = tag + (r == &on ? " overlap on" : " overlap off");
        const int64_t n = r->hi - r->lo;
        if (r->out.spatial) {
          EXPECT_LT(test::rel_diff(r->y, test::block_of(serial.y, r->out_box, r->lo, n)), test::kTol) << t << " forward";
        } else {
          Tensor rows({n, r->out.features});
          std::copy_n(serial.y.data() + r->lo * r->out.features, rows.numel(), rows.data());
          EXPECT_LT(test::rel_diff(r->y, rows), test::kTol) << t << " forward";
        }
        EXPECT_LT(test::rel_diff(r->dx, test::block_of(serial.dx, r->in_box, r->lo, n)), test::kTol)
            << t << " input gradient";
        for (size_t i = 0; i < np; ++i)
          EXPECT_LT(test::rel_diff(r->grads[i], serial.grads[i]), test::kTol) << t << " gradient of parameter " << i;
      }
      EXPECT_TRUE(test::same_bits(on.y, off.y)) << tag << ": overlap on and off differ in the forward output";
      EXPECT_TRUE(test::same_bits(on.dx, off.dx)) << tag << ": overlap on and off differ in the input gradient";
      for (size_t i = 0; i < np; ++i)
        EXPECT_TRUE(test::same_bits(on.grads[i], off.grads[i])) << tag << ": overlap on and off differ in parameter " << i;
      compared += 2;
    }
  }
  // A layer that no layout could split was not tested at all.
  EXPECT_GT(ran, 0) << what << ": every layout of " << world.size() << " ranks was refused";
  if (world.rank() == 0) std::printf("[ checked  ] %s: %d runs against the 1-rank run\n", what.c_str(), compared);
}

TEST(LayerEquivalence, Conv3d) {
  // Kernels 1 to 5, even ones with 'same' padding, strides 1 and 2, and
  // output channels oneDNN blocks (16) besides those it does not (4).
  struct C { int k, s; Padding p; bool bias; int64_t cout; };
  for (C c : {C{1, 1, Padding::kValid, true, 4}, C{2, 1, Padding::kSame, true, 4}, C{3, 1, Padding::kHalf, false, 4},
              C{3, 1, Padding::kValid, true, 4}, C{3, 2, Padding::kHalf, true, 4}, C{4, 1, Padding::kSame, false, 4},
              C{5, 1, Padding::kHalf, true, 4}, C{2, 2, Padding::kValid, false, 4}, C{3, 1, Padding::kHalf, false, 16},
              C{2, 1, Padding::kSame, true, 16}, C{4, 2, Padding::kSame, true, 16}, C{5, 2, Padding::kHalf, false, 16}}) {
    std::string what = "conv k" + std::to_string(c.k) + " s" + std::to_string(c.s) + " pad" +
                       std::to_string(int(c.p)) + (c.bias ? " bias" : "") + " cout " + std::to_string(c.cout);
    expect_equivalent(what, [c] {
      return std::make_unique<Conv3d>("conv", Conv3dOptions{kChannels, c.cout, c.k, c.s, c.p, c.bias}, 7);
    });
  }
}

TEST(LayerEquivalence, ConvTranspose3d) {
  // U-Net's two upsamplings (no halo; a halo of one before each block), and
  // kernel 4 with padding 1 (halos on both sides).
  struct C { int k, s, p, op; bool bias; };
  for (C c : {C{2, 2, 0, 0, true}, C{3, 2, 1, 1, false}, C{4, 2, 1, 0, true}, C{3, 1, 1, 0, true}}) {
    std::string what = "conv-transpose k" + std::to_string(c.k) + " s" + std::to_string(c.s) + " p" +
                       std::to_string(c.p) + " op" + std::to_string(c.op);
    expect_equivalent(what, [c] {
      return std::make_unique<ConvTranspose3d>("up", ConvTranspose3dOptions{kChannels, 4, c.k, c.s, c.p, c.op, c.bias},
                                               7);
    });
  }
}

TEST(LayerEquivalence, SkipConnection) {
  // skip -> conv k3 (halo) -> pool -> conv-transpose k3 s2 p1 op1 (reverse halo) -> concat with the skip.
  expect_equivalent("skip connection", [] {
    auto link = std::make_shared<SkipLink>();
    auto c = std::make_unique<test::Composite>("block");
    c->add(std::make_unique<SkipSource>("skip", link));
    c->add(std::make_unique<Conv3d>("conv", Conv3dOptions{kChannels, 4, 3, 1, Padding::kHalf, true}, 7));
    c->add(std::make_unique<Pool3d>("pool", PoolKind::kMax, 2, 2, 0));
    c->add(std::make_unique<ConvTranspose3d>("up", ConvTranspose3dOptions{4, 2, 3, 2, 1, 1, true}, 7));
    c->add(std::make_unique<SkipConcat>("cat", link));
    return c;
  }, 2);  // one pooling level: even bounds, as the U-Net builder aligns them
}

TEST(LayerEquivalence, Pooling) {
  for (auto kind : {PoolKind::kMax, PoolKind::kAvg})
    for (int k : {2, 3})
      expect_equivalent(std::string(kind == PoolKind::kMax ? "maxpool" : "avgpool") + " k" + std::to_string(k),
                        [=] { return std::make_unique<Pool3d>("pool", kind, k, 2, k == 3 ? 1 : 0); });
}

TEST(LayerEquivalence, BatchNormActivationsDropout) {
  expect_equivalent("batchnorm", [] { return std::make_unique<BatchNorm3d>("bn", kChannels); });
  expect_equivalent("leaky relu", [] { return std::make_unique<Activation>("a", ActKind::kLeakyRelu, 0.3f); });
  expect_equivalent("tanh", [] { return std::make_unique<Activation>("a", ActKind::kTanh); });
  expect_equivalent("dropout", [] { return std::make_unique<Dropout>("drop", 0.5f); });
}

TEST(LayerEquivalence, FlattenLinear) {
  expect_equivalent("flatten+linear", [] {
    return std::make_unique<Linear>("fc1", kChannels * kExtent[0] * kExtent[1] * kExtent[2], 5, 3);
  }, 1, false);
}

}  // namespace
