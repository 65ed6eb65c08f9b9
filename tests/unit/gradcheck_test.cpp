// Finite-difference gradient checks of every layer, on one rank with the
// reference backend: the loss L = sum(y * r) for a fixed random r, central
// differences for sampled input elements and parameters, against backward.
// Layers store fp32, the reference accumulates in double; the step is 1e-2
// (conv, linear and average pooling are linear, so their differences are
// exact up to rounding).
#include <gtest/gtest.h>

#include <cstring>

#include <functional>
#include <memory>

#include "hybrid3d/backend/ref/ref_backend.hpp"
#include "hybrid3d/backend/registry.hpp"
#include "hybrid3d/core/rng.hpp"
#include "hybrid3d/layers/activation.hpp"
#include "hybrid3d/layers/batchnorm3d.hpp"
#include "hybrid3d/layers/conv3d.hpp"
#include "hybrid3d/layers/conv_transpose3d.hpp"
#include "hybrid3d/layers/dropout.hpp"
#include "hybrid3d/layers/linear.hpp"
#include "hybrid3d/layers/pool3d.hpp"
#include "hybrid3d/layers/residual.hpp"
#include "hybrid3d/layers/skip.hpp"
#include "hybrid3d/models/network.hpp"
#include "composite_layer.hpp"
#include "test_util.hpp"

using namespace h3d;

namespace {

struct Harness {
  Comm self = Comm::borrow(MPI_COMM_SELF);
  ProcessGrid grid{self, {1, 1, 1}};
  RefBackend ref;
  StepContext ctx() {
    StepContext c{&ref, &grid, true, 42, 3, {0, 1}};
    return c;
  }
};

double loss_of(Layer& l, Harness& h, const Tensor& x, const Tensor& r) {
  Tensor y;
  auto ctx = h.ctx();
  l.forward(ctx, x, y);
  double s = 0;
  for (int64_t i = 0; i < y.numel(); ++i) s += double(y[i]) * r[i];
  return s;
}

void check_gradients(Layer& layer, const ActShape& in, Tensor x) {
  Harness h;
  layer.setup(in, h.grid);
  auto ctx = h.ctx();
  Tensor y, dx;
  layer.forward(ctx, x, y);
  Tensor r(y.shape());
  for (int64_t i = 0; i < r.numel(); ++i) r[i] = float(2 * uniform01(9, 1, uint64_t(i)) - 1);
  layer.backward(ctx, x, y, r, dx);
  ASSERT_EQ(dx.shape(), x.shape());
  const double eps = 1e-2;
  auto check = [&](float* v, float analytic, const std::string& what) {
    float keep = *v;
    *v = keep + float(eps);
    double lp = loss_of(layer, h, x, r);
    *v = keep - float(eps);
    double lm = loss_of(layer, h, x, r);
    *v = keep;
    double fd = (lp - lm) / (2 * eps);
    EXPECT_NEAR(analytic, fd, 2e-3 + 1e-2 * std::abs(fd)) << layer.name() << " " << what;
  };
  // Keep backward's parameter gradients: probing runs more forwards.
  std::vector<Tensor> grads;
  for (auto* p : layer.params()) grads.push_back(p->grad);
  for (int t = 0; t < 24; ++t) {
    int64_t i = int64_t(hash_key(5, 6, uint64_t(t)) % uint64_t(x.numel()));
    check(&x[i], dx[i], "input[" + std::to_string(i) + "]");
  }
  auto ps = layer.params();
  for (size_t p = 0; p < ps.size(); ++p)
    for (int t = 0; t < 12; ++t) {
      int64_t i = int64_t(hash_key(7, p, uint64_t(t)) % uint64_t(ps[p]->value.numel()));
      check(&ps[p]->value[i], grads[p][i], ps[p]->name + "[" + std::to_string(i) + "]");
    }
}

ActShape spatial(int64_t c, std::array<int64_t, 3> e) {
  ActShape s;
  s.channels = c;
  s.dist = Distribution::balanced(e, {1, 1, 1});
  return s;
}

Tensor input(int64_t n, int64_t c, std::array<int64_t, 3> e) {
  Box b{{Range{0, e[0]}, Range{0, e[1]}, Range{0, e[2]}}};
  return test::global_random(3, n, c, b, e);
}

TEST(GradCheck, Conv3dAllKernels) {
  struct C { int k, s; Padding p; bool bias; };
  for (C c : {C{1, 1, Padding::kValid, true}, C{2, 1, Padding::kSame, true}, C{3, 1, Padding::kHalf, false},
              C{3, 2, Padding::kHalf, true}, C{4, 1, Padding::kSame, false}, C{5, 1, Padding::kHalf, true},
              C{2, 2, Padding::kValid, false}}) {
    Conv3d conv("conv", {2, 3, c.k, c.s, c.p, c.bias}, 1);
    check_gradients(conv, spatial(2, {6, 5, 7}), input(2, 2, {6, 5, 7}));
  }
}

// ConvTranspose3d straight from PyTorch's definition (scatter form, double):
// y[n, o, i*s - p + t] += x[n, c, i] * w[c, o, t], then the bias.
Tensor conv_transpose_direct(const Tensor& x, const Tensor& w, const Tensor* b, int s, int p, int op) {
  const int64_t n = x.dim(0), cin = x.dim(1), cout = w.dim(1), k = w.dim(2);
  std::array<int64_t, 3> in{x.dim(2), x.dim(3), x.dim(4)}, out{};
  for (int d = 0; d < 3; ++d) out[size_t(d)] = (in[size_t(d)] - 1) * s - 2 * p + k + op;
  std::vector<double> acc(size_t(n * cout * out[0] * out[1] * out[2]), 0.0);
  for (int64_t a = 0; a < n; ++a)
    for (int64_t c = 0; c < cin; ++c)
      for (int64_t z = 0; z < in[0]; ++z)
        for (int64_t y = 0; y < in[1]; ++y)
          for (int64_t q = 0; q < in[2]; ++q) {
            const double v = x[(((a * cin + c) * in[0] + z) * in[1] + y) * in[2] + q];
            for (int64_t o = 0; o < cout; ++o)
              for (int64_t t0 = 0; t0 < k; ++t0)
                for (int64_t t1 = 0; t1 < k; ++t1)
                  for (int64_t t2 = 0; t2 < k; ++t2) {
                    const int64_t oz = z * s - p + t0, oy = y * s - p + t1, ox = q * s - p + t2;
                    if (oz < 0 || oy < 0 || ox < 0 || oz >= out[0] || oy >= out[1] || ox >= out[2]) continue;
                    acc[size_t((((a * cout + o) * out[0] + oz) * out[1] + oy) * out[2] + ox)] +=
                        v * w[(((c * cout + o) * k + t0) * k + t1) * k + t2];
                  }
          }
  Tensor yt({n, cout, out[0], out[1], out[2]});
  const int64_t vol = out[0] * out[1] * out[2];
  for (int64_t i = 0; i < yt.numel(); ++i) yt[i] = float(acc[size_t(i)] + (b ? double((*b)[(i / vol) % cout]) : 0.0));
  return yt;
}

struct TransposeCase {
  int k, s, p, op;
  bool bias;
};
const TransposeCase kTransposeCases[] = {{2, 2, 0, 0, true}, {3, 2, 1, 1, false}, {3, 1, 1, 0, true},
                                         {3, 2, 1, 0, true}, {4, 2, 1, 0, false}};

TEST(ConvTranspose3d, EqualsTheDefinition) {
  Harness h;
  std::vector<std::unique_ptr<Backend>> registered;  // every backend of the registry, ref included
  for (const auto& name : backend_names()) registered.push_back(make_backend(name));
  for (auto& owned : registered) {
    Backend* backend = owned.get();
    for (const auto& c : kTransposeCases) {
      ConvTranspose3d up("up", {2, 3, c.k, c.s, c.p, c.op, c.bias}, 4);
      const std::array<int64_t, 3> e{3, 4, 5};
      up.setup(spatial(2, e), h.grid);
      Tensor x = input(2, 2, e), y;
      auto ctx = h.ctx();
      ctx.backend = backend;
      up.forward(ctx, x, y);
      auto ps = up.params();
      Tensor want = conv_transpose_direct(x, ps[0]->value, c.bias ? &ps[1]->value : nullptr, c.s, c.p, c.op);
      ASSERT_EQ(y.shape(), want.shape()) << "k" << c.k << " s" << c.s;
      EXPECT_LT(test::rel_diff(y, want), 1e-6)
          << backend->name() << " k" << c.k << " s" << c.s << " p" << c.p << " op" << c.op;
    }
  }
}

TEST(GradCheck, ConvTranspose3d) {
  for (const auto& c : kTransposeCases) {
    ConvTranspose3d up("up", {2, 3, c.k, c.s, c.p, c.op, c.bias}, 1);
    check_gradients(up, spatial(2, {3, 4, 5}), input(2, 2, {3, 4, 5}));
  }
}

// A U-Net level in miniature: the skip keeps x, a conv and an upsampling
// path change it, the concatenation appends x again.
std::unique_ptr<test::Composite> skip_block(uint64_t seed) {
  auto link = std::make_shared<SkipLink>();
  auto c = std::make_unique<test::Composite>("block");
  c->add(std::make_unique<SkipSource>("skip", link));
  c->add(std::make_unique<Conv3d>("down", Conv3dOptions{2, 3, 2, 2, Padding::kValid, true}, seed));
  c->add(std::make_unique<Activation>("act", ActKind::kTanh));
  c->add(std::make_unique<ConvTranspose3d>("up", ConvTranspose3dOptions{3, 2, 2, 2, 0, 0, false}, seed));
  c->add(std::make_unique<SkipConcat>("cat", link));
  return c;
}

TEST(GradCheck, SkipConnection) {
  auto block = skip_block(2);
  check_gradients(*block, spatial(2, {4, 6, 4}), input(2, 2, {4, 6, 4}));
}

// `net` (through its memory plan: in-place and consuming paths) gives the
// output and parameter gradients of `plain` (every activation kept) on the
// same input of 2 samples, 2 channels, 4x6x4.
void expect_plan_equals_plain(Layer& plain, Network& net, const std::string& what) {
  Harness h;
  const std::array<int64_t, 3> e{4, 6, 4};
  plain.setup(spatial(2, e), h.grid);
  net.setup(spatial(2, e), h.grid);
  Tensor x = input(2, 2, e), y_plain, dx;
  auto ctx = h.ctx();
  plain.forward(ctx, x, y_plain);
  const Tensor y = net.forward(ctx, x);
  EXPECT_LT(test::rel_diff(y, y_plain), 1e-6) << what;
  Tensor dy(y.shape());
  for (int64_t i = 0; i < dy.numel(); ++i) dy[i] = float(2 * uniform01(8, 1, uint64_t(i)) - 1);
  plain.backward(ctx, x, y_plain, dy, dx);
  net.backward(ctx, dy);
  auto pp = plain.params(), np = net.params();
  ASSERT_EQ(pp.size(), np.size()) << what;
  for (size_t i = 0; i < pp.size(); ++i)
    EXPECT_LT(test::rel_diff(np[i]->grad, pp[i]->grad), 1e-6) << what << ": " << np[i]->name;
}

// Network::setup fuses a LeakyReLU into the convolution before it (the
// convolution applies it, the activation only records the signs): the
// output and every gradient are bitwise those of the same network where a
// scaling by 1 between the two keeps them apart. A ReLU (slope 0) and a
// LeakyReLU after a pooling stay unfused.
TEST(NetworkFusion, LeakyReluIntoConvolutionChangesNoBits) {
  auto build = [](bool apart, Conv3d*& conv, Activation*& act, Activation*& relu) {
    auto net = std::make_unique<Network>();
    net->add(std::make_unique<Conv3d>("conv0", Conv3dOptions{2, 2, 1, 1, Padding::kValid, true}, 4));
    auto r = std::make_unique<Activation>("relu", ActKind::kRelu);
    relu = r.get();
    net->add(std::move(r));
    auto c = std::make_unique<Conv3d>("conv", Conv3dOptions{2, 3, 3, 1, Padding::kHalf, true}, 5);
    conv = c.get();
    net->add(std::move(c));
    if (apart) net->add(std::make_unique<Activation>("apart", ActKind::kScale, 1.0f));
    auto a = std::make_unique<Activation>("act", ActKind::kLeakyRelu, 0.3f);
    act = a.get();
    net->add(std::move(a));
    net->add(std::make_unique<Pool3d>("pool", PoolKind::kMax, 2, 2, 0));
    net->add(std::make_unique<Activation>("after_pool", ActKind::kLeakyRelu, 0.3f));
    net->add(std::make_unique<Conv3d>("conv2", Conv3dOptions{3, 2, 1, 1, Padding::kValid, true}, 6));
    return net;
  };
  Harness h;
  const std::array<int64_t, 3> e{4, 6, 4};
  Conv3d *conv = nullptr, *conv_apart = nullptr;
  Activation *act = nullptr, *act_apart = nullptr, *relu = nullptr, *relu_apart = nullptr;
  auto fused = build(false, conv, act, relu), apart = build(true, conv_apart, act_apart, relu_apart);
  fused->setup(spatial(2, e), h.grid);
  apart->setup(spatial(2, e), h.grid);
  EXPECT_EQ(conv->fused_leaky_slope(), 0.3f);
  EXPECT_TRUE(act->absorbed());
  EXPECT_EQ(conv_apart->fused_leaky_slope(), 0.0f);
  EXPECT_FALSE(act_apart->absorbed());
  EXPECT_FALSE(relu->absorbed());
  Tensor x = input(2, 2, e);
  auto ctx = h.ctx();
  const Tensor y = fused->forward(ctx, x), y_apart = apart->forward(ctx, x);
  ASSERT_EQ(y.shape(), y_apart.shape());
  EXPECT_EQ(std::memcmp(y.data(), y_apart.data(), size_t(y.numel()) * sizeof(float)), 0);
  int64_t nonzero = 0;
  for (int64_t i = 0; i < y.numel(); ++i) nonzero += y[i] != 0.0f;
  EXPECT_GT(nonzero, y.numel() / 4) << "the output says nothing";
  Tensor dy(y.shape());
  for (int64_t i = 0; i < dy.numel(); ++i) dy[i] = float(2 * uniform01(8, 1, uint64_t(i)) - 1);
  fused->backward(ctx, dy);
  apart->backward(ctx, dy);
  auto fp = fused->params(), ap = apart->params();
  ASSERT_EQ(fp.size(), ap.size());
  for (size_t i = 0; i < fp.size(); ++i)
    EXPECT_EQ(std::memcmp(fp[i]->grad.data(), ap[i]->grad.data(), size_t(fp[i]->grad.numel()) * sizeof(float)), 0)
        << fp[i]->name;
}

// The same block through Network's memory plan (in-place and consuming
// paths) gives the output and parameter gradients of the plain path.
TEST(SkipConnection, NetworkMemoryPlanEqualsPlainPath) {
  Network net;
  auto link = std::make_shared<SkipLink>();
  net.add(std::make_unique<Activation>("pre", ActKind::kScale, 1.0f));
  net.add(std::make_unique<SkipSource>("skip", link));
  net.add(std::make_unique<Conv3d>("down", Conv3dOptions{2, 3, 2, 2, Padding::kValid, true}, 3));
  net.add(std::make_unique<Activation>("act", ActKind::kTanh));
  net.add(std::make_unique<ConvTranspose3d>("up", ConvTranspose3dOptions{3, 2, 2, 2, 0, 0, false}, 3));
  net.add(std::make_unique<SkipConcat>("cat", link));
  expect_plan_equals_plain(*skip_block(3), net, "skip block");
}

// A max pooling whose 2x2x2 windows tile its input, after an activation
// that keeps only signs: through Network's plan it writes its input
// gradient over its input (Pool3d::backward_consuming_input).
std::vector<std::unique_ptr<Layer>> conv_act_pool(uint64_t seed) {
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<Conv3d>("conv", Conv3dOptions{2, 3, 3, 1, Padding::kHalf, true}, seed));
  layers.push_back(std::make_unique<Activation>("act", ActKind::kLeakyRelu, 0.3f));
  layers.push_back(std::make_unique<Pool3d>("pool", PoolKind::kMax, 2, 2, 0));
  layers.push_back(std::make_unique<Conv3d>("conv2", Conv3dOptions{3, 2, 1, 1, Padding::kValid, true}, seed + 1));
  return layers;
}

TEST(PoolingOverItsInput, NetworkMemoryPlanEqualsPlainPath) {
  test::Composite plain("block");
  Network net;
  for (auto& l : conv_act_pool(7)) plain.add(std::move(l));
  for (auto& l : conv_act_pool(7)) net.add(std::move(l));
  expect_plan_equals_plain(plain, net, "conv, leaky ReLU, 2x2x2 max pooling");
}

// A ResNet block in miniature: the skip keeps x, a conv and an activation
// change it, ResidualAdd adds x back through the identity or through a
// projection (k1 stride 2 conv + batch norm) when the conv has stride 2.
template <typename Add>
void add_residual_block(Add add, bool projection, uint64_t seed) {
  auto link = std::make_shared<SkipLink>();
  const int64_t cout = projection ? 3 : 2;
  const int stride = projection ? 2 : 1;
  add(std::make_unique<SkipSource>("in", link));
  add(std::make_unique<Conv3d>("conv", Conv3dOptions{2, cout, 3, stride, Padding::kHalf, false}, seed));
  add(std::make_unique<Activation>("act", ActKind::kTanh));
  if (projection)
    add(std::make_unique<ResidualAdd>("add", link, "downsample", Projection{2, cout, stride}, seed));
  else
    add(std::make_unique<ResidualAdd>("add", link));
}

std::unique_ptr<test::Composite> residual_block(bool projection, uint64_t seed) {
  auto c = std::make_unique<test::Composite>("block");
  add_residual_block([&](std::unique_ptr<Layer> l) { c->add(std::move(l)); }, projection, seed);
  return c;
}

TEST(GradCheck, ResidualIdentityAndProjection) {
  for (bool projection : {false, true}) {
    auto block = residual_block(projection, 4);
    check_gradients(*block, spatial(2, {4, 6, 4}), input(2, 2, {4, 6, 4}));
    EXPECT_EQ(block->params().size(), projection ? 4u : 1u);  // conv (+ projection conv, bn weight, bn bias)
  }
}

// Both blocks through Network's memory plan (the in-place add, the link's
// gradient joining at the entry) give the plain path's output and gradients.
TEST(Residual, NetworkMemoryPlanEqualsPlainPath) {
  for (bool projection : {false, true}) {
    Network net;
    net.add(std::make_unique<Activation>("pre", ActKind::kScale, 1.0f));
    add_residual_block([&](std::unique_ptr<Layer> l) { net.add(std::move(l)); }, projection, 5);
    expect_plan_equals_plain(*residual_block(projection, 5), net, projection ? "projection" : "identity");
  }
}

TEST(GradCheck, Pooling) {
  for (auto kind : {PoolKind::kMax, PoolKind::kAvg})
    for (int k : {2, 3}) {
      Pool3d pool("pool", kind, k, 2, k == 3 ? 1 : 0);
      std::array<int64_t, 3> e{6, 4, 8};
      Tensor x = input(2, 2, e);
      // distinct values spaced 0.05 apart (more than 2*eps): no ties for max
      for (int64_t i = 0; i < x.numel(); ++i) x[i] = 0.05f * float((i * 7919) % x.numel()) - 5.0f;
      check_gradients(pool, spatial(2, e), x);
    }
}

TEST(GradCheck, BatchNorm3d) {
  BatchNorm3d bn("bn", 3);
  check_gradients(bn, spatial(3, {4, 3, 5}), input(2, 3, {4, 3, 5}));
}

TEST(GradCheck, Activations) {
  for (auto k : {ActKind::kRelu, ActKind::kLeakyRelu, ActKind::kTanh, ActKind::kScaledTanh, ActKind::kScale}) {
    Activation a("act", k, k == ActKind::kLeakyRelu ? 0.3f : 1.2f);
    Tensor x = input(2, 2, {3, 3, 3});
    for (int64_t i = 0; i < x.numel(); ++i) x[i] += x[i] < 0 ? -0.05f : 0.05f;  // stay off the ReLU kink
    check_gradients(a, spatial(2, {3, 3, 3}), x);
  }
}

TEST(GradCheck, Dropout) {
  Dropout d("drop", 0.4f);
  check_gradients(d, spatial(2, {3, 4, 3}), input(2, 2, {3, 4, 3}));
}

TEST(GradCheck, LinearOnSpatialAndDense) {
  Linear fc("fc", 2 * 3 * 2 * 4, 5, 1);
  check_gradients(fc, spatial(2, {3, 2, 4}), input(2, 2, {3, 2, 4}));
  Linear fc2("fc2", 6, 4, 1);
  ActShape dense;
  dense.spatial = false;
  dense.features = 6;
  Tensor x({2, 6});
  for (int64_t i = 0; i < x.numel(); ++i) x[i] = float(2 * uniform01(4, 4, uint64_t(i)) - 1);
  check_gradients(fc2, dense, x);
}

}  // namespace
