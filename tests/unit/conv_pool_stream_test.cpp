// The first convolution, its leaky ReLU and the average or max pooling
// after it, streamed slab by slab (layers/conv_pool_stream.hpp), on the ref
// and cpu backends:
// - through Network (which streams them) against the same network with the
//   layers apart (H3D_STREAM_FIRST_LAYER=0): output and every parameter
//   gradient, for pooling windows that overlap, tile or pad (max pooling
//   streams where its windows tile), convolutions with and without padding,
//   bias and ReLU;
// - slabs of one plane each against one slab, on a block inside a larger
//   volume (a halo on every side, the volume's edge on some).
// The distributed runs of the streamed layers against the serial run are
// ModelEquivalence.CosmoflowLbann and .Cosmoflow (tests/mpi).
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "hybrid3d/backend/registry.hpp"
#include "hybrid3d/core/rng.hpp"
#include "hybrid3d/layers/activation.hpp"
#include "hybrid3d/layers/conv3d.hpp"
#include "hybrid3d/layers/conv_pool_stream.hpp"
#include "hybrid3d/layers/pool3d.hpp"
#include "hybrid3d/models/network.hpp"
#include "test_util.hpp"

using namespace h3d;

namespace {

struct Case {
  int64_t cin;
  int conv_k;
  Padding conv_pad;
  int pool_k, pool_s, pool_p;
  bool bias, leaky;
  PoolKind pool = PoolKind::kAvg;
  // Network streams max pooling only where its windows tile (the stream
  // itself takes any window: SlabsOfOnePlaneEqualOneSlab).
  bool network_streams() const { return pool == PoolKind::kAvg || (pool_k == pool_s && pool_p == 0); }
  std::string what() const {
    return "cin " + std::to_string(cin) + ", conv k" + std::to_string(conv_k) + ", " +
           (pool == PoolKind::kMax ? "max" : "avg") + " pool k" + std::to_string(pool_k) +
           " s" + std::to_string(pool_s) + " p" + std::to_string(pool_p) + (bias ? ", bias" : "") +
           (leaky ? ", leaky ReLU" : "");
  }
};

const Case kCases[] = {
    {4, 3, Padding::kHalf, 3, 2, 1, true, true},    // cosmoflow-lbann's first layers
    {1, 2, Padding::kSame, 2, 2, 0, true, true},    // windows that tile
    {3, 3, Padding::kValid, 3, 1, 1, false, true},  // stride-1 pooling, no conv padding
    {2, 1, Padding::kValid, 3, 2, 1, true, false},  // no ReLU
    {4, 2, Padding::kSame, 2, 2, 0, true, true, PoolKind::kMax},    // cosmoflow's first layers
    {2, 3, Padding::kHalf, 3, 2, 1, false, true, PoolKind::kMax},   // max windows that overlap and pad
    {1, 2, Padding::kValid, 2, 2, 0, true, false, PoolKind::kMax},  // max, no ReLU
};

constexpr int64_t kCout = 5;

struct Built {
  std::unique_ptr<Network> net;
  Conv3d* conv = nullptr;
};

Built build(const Case& c) {
  Built b;
  b.net = std::make_unique<Network>();
  auto conv = std::make_unique<Conv3d>("conv", Conv3dOptions{c.cin, kCout, c.conv_k, 1, c.conv_pad, c.bias}, 11);
  b.conv = conv.get();
  b.net->add(std::move(conv));
  if (c.leaky) b.net->add(std::make_unique<Activation>("act", ActKind::kLeakyRelu, 0.2f));
  b.net->add(std::make_unique<Pool3d>("pool", c.pool, c.pool_k, c.pool_s, c.pool_p));
  b.net->add(std::make_unique<Conv3d>("after", Conv3dOptions{kCout, 2, 1, 1, Padding::kValid, true}, 12));
  return b;
}

struct Result {
  Tensor y;
  std::vector<Tensor> grads;
};

Result run(Backend& be, const Case& c, bool stream) {
  Comm self = Comm::borrow(MPI_COMM_SELF);
  ProcessGrid grid(self, {1, 1, 1});
  const std::array<int64_t, 3> e{9, 6, 7};
  ActShape in;
  in.channels = c.cin;
  in.dist = Distribution::balanced(e, {1, 1, 1});
  if (!stream) ::setenv("H3D_STREAM_FIRST_LAYER", "0", 1);
  Built b = build(c);
  b.net->setup(in, grid);
  ::unsetenv("H3D_STREAM_FIRST_LAYER");
  EXPECT_EQ(b.conv->streams(), stream && c.network_streams()) << c.what();
  StepContext ctx = make_step_context(&be, &grid, 42, true, true, 0, 0, 2);
  Tensor x = test::global_random(3, 2, c.cin, Box{{Range{0, e[0]}, Range{0, e[1]}, Range{0, e[2]}}}, e);
  Result r;
  r.y = b.net->forward(ctx, x);
  Tensor dy(r.y.shape());
  for (int64_t i = 0; i < dy.numel(); ++i) dy[i] = float(2 * uniform01(8, 1, uint64_t(i)) - 1);
  b.net->backward(ctx, dy);
  for (Param* p : b.net->params()) r.grads.push_back(p->grad);
  return r;
}

// check(backend, case, what) on ref and cpu for every case; returns how many ran.
template <typename Check>
int for_each_backend_and_case(Check check) {
  int ran = 0;
  for (const char* backend : {"ref", "cpu"}) {
    std::unique_ptr<Backend> be = make_backend(backend);
    for (const Case& c : kCases) {
      check(*be, c, std::string(backend) + ": " + c.what());
      ++ran;
    }
  }
  return ran;
}

TEST(ConvPoolStream, NetworkStreamedEqualsLayersApart) {
  const int ran = for_each_backend_and_case([](Backend& be, const Case& c, const std::string& what) {
    const Result apart = run(be, c, false), streamed = run(be, c, true);
    EXPECT_LT(test::rel_diff(streamed.y, apart.y), 1e-6) << what << ": output";
    ASSERT_EQ(streamed.grads.size(), apart.grads.size()) << what;
    for (size_t i = 0; i < apart.grads.size(); ++i)
      EXPECT_LT(test::rel_diff(streamed.grads[i], apart.grads[i]), test::kTol) << what << ": gradient " << i;
  });
  EXPECT_EQ(ran, 2 * int(std::size(kCases)));
}

// One rank's block of a 12 x 10 x 11 volume, the pooling's outputs D 2..4,
// H all, W 1..5: halo before and after along D and W, the volume's edge
// (the pooling's padding) along H.
TEST(ConvPoolStream, SlabsOfOnePlaneEqualOneSlab) {
  const int ran = for_each_backend_and_case([](Backend& be, const Case& c, const std::string& what) {
    ConvPoolStream::Geometry g;
    g.cin = c.cin;
    g.cout = kCout;
    g.conv = make_window(c.conv_k, 1, c.conv_pad);
    g.pool = Window1D{c.pool_k, c.pool_s, c.pool_p, c.pool_p};
    g.pool_kind = c.pool;
    g.bias = c.bias;
    g.leaky_slope = c.leaky ? 0.2f : 0.0f;
    const std::array<int64_t, 3> volume{12, 10, 11};
    for (int d = 0; d < 3; ++d) {
      g.conv_volume.r[size_t(d)] = Range{0, g.conv.out_extent(volume[size_t(d)])};
      const int64_t out = g.pool.out_extent(g.conv_volume.r[size_t(d)].size());
      g.own_out.r[size_t(d)] = d == 1 ? Range{0, out} : Range{std::min<int64_t>(2, out - 1), out - 1};
      g.padded_in.r[size_t(d)] = ConvPoolStream::composed(g.conv, g.pool).needed(g.own_out.r[size_t(d)]);
    }
    const int64_t n = 2, weights = kCout * c.cin * c.conv_k * c.conv_k * c.conv_k;
    const Tensor x = test::global_random(5, n, c.cin, g.padded_in, volume);
    Tensor w({weights}), b({kCout});
    for (int64_t i = 0; i < weights; ++i) w[i] = float(uniform01(6, 1, uint64_t(i)) - 0.5);
    for (int64_t i = 0; i < kCout; ++i) b[i] = float(uniform01(6, 2, uint64_t(i)) - 0.5);
    const auto oe = g.own_out.extents();
    Tensor dy({n, kCout, oe[0], oe[1], oe[2]});
    for (int64_t i = 0; i < dy.numel(); ++i) dy[i] = float(2 * uniform01(7, 1, uint64_t(i)) - 1);
    Tensor y[2], dw[2], db[2];
    int64_t slabs[2] = {};
    for (int thin = 0; thin < 2; ++thin) {
      g.slab_bytes = thin ? 1 : ConvPoolStream::kSlabBytes;
      ConvPoolStream s;
      s.plan(g);
      slabs[thin] = s.slabs();
      y[thin] = Tensor(dy.shape());
      dw[thin] = Tensor({weights});
      db[thin] = Tensor({kCout});
      s.forward(be, true, n, x.data(), w.data(), c.bias ? b.data() : nullptr, y[thin].data());
      s.backward(be, n, x.data(), dy.data(), dw[thin].data(), c.bias ? db[thin].data() : nullptr);
    }
    EXPECT_EQ(slabs[0], 1) << what;
    EXPECT_EQ(slabs[1], oe[0]) << what;
    EXPECT_LT(test::rel_diff(y[1], y[0]), 1e-6) << what << ": output";
    EXPECT_LT(test::rel_diff(dw[1], dw[0]), test::kTol) << what << ": weight gradient";
    if (c.bias) EXPECT_LT(test::rel_diff(db[1], db[0]), test::kTol) << what << ": bias gradient";
  });
  EXPECT_EQ(ran, 2 * int(std::size(kCases)));
}

}  // namespace
