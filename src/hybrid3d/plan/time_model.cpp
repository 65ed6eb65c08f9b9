#include "hybrid3d/plan/time_model.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hybrid3d/backend/registry.hpp"
#include "hybrid3d/core/buffer_pool.hpp"
#include "hybrid3d/core/bytes.hpp"
#include "hybrid3d/core/error.hpp"
#include "hybrid3d/core/profiler.hpp"
#include "hybrid3d/core/tensor.hpp"
#include "hybrid3d/models/registry.hpp"
#include "hybrid3d/parallel/comm.hpp"
#include "hybrid3d/parallel/process_grid.hpp"

namespace h3d {

std::array<double, 3> Machine::rates(const ConvClass& c) const {
  for (const auto& r : conv)
    if (!(r.cls < c) && !(c < r.cls)) return r.gflops;
  return conv_gflops;
}

namespace {

double positive(const nlohmann::json& j, const char* key, double fallback, const std::string& path) {
  if (!j.contains(key)) return fallback;
  H3D_USAGE_CHECK(j[key].is_number() && j[key].get<double>() > 0,
                  "--machine " << path << ": '" << key << "' must be a positive number");
  return j[key].get<double>();
}

std::array<double, 3> three_rates(const nlohmann::json& j, const std::string& path) {
  H3D_USAGE_CHECK(j.is_array() && j.size() == 3, "--machine " << path
                                                              << ": a convolution rate is [forward, "
                                                                 "backward data, backward weights] in GFLOP/s");
  std::array<double, 3> out{};
  for (size_t i = 0; i < 3; ++i) {
    H3D_USAGE_CHECK(j[i].is_number() && j[i].get<double>() > 0, "--machine " << path << ": rates must be positive");
    out[i] = j[i].get<double>();
  }
  return out;
}

}  // namespace

Machine Machine::load(const std::string& path) {
  std::ifstream f(path);
  H3D_USAGE_CHECK(f.good(), "--machine: cannot open '" << path << "' (write one with hybrid3d plan --calibrate)");
  nlohmann::json j;
  try {
    f >> j;
  } catch (const std::exception& e) {
    H3D_THROW(UsageError, "--machine " << path << ": not JSON (" << e.what() << ")");
  }
  H3D_USAGE_CHECK(j.is_object(), "--machine " << path << ": expected a JSON object");
  Machine m;
  if (j.contains("name")) m.name = j["name"].get<std::string>();
  if (j.contains("conv_gflops")) m.conv_gflops = three_rates(j["conv_gflops"], path);
  if (j.contains("pool_gbps")) {
    H3D_USAGE_CHECK(j["pool_gbps"].is_array() && j["pool_gbps"].size() == 2 && j["pool_gbps"][0].is_number() &&
                        j["pool_gbps"][1].is_number() && j["pool_gbps"][0].get<double>() > 0 &&
                        j["pool_gbps"][1].get<double>() > 0,
                    "--machine " << path << ": 'pool_gbps' is [forward, backward] in GB/s, both positive");
    m.pool_gbps = {j["pool_gbps"][0].get<double>(), j["pool_gbps"][1].get<double>()};
  }
  m.gemm_gflops = positive(j, "gemm_gflops", m.gemm_gflops, path);
  m.stream_gbps = positive(j, "stream_gbps", m.stream_gbps, path);
  m.p2p_latency_s = positive(j, "p2p_latency_s", m.p2p_latency_s, path);
  m.p2p_gbps = positive(j, "p2p_gbps", m.p2p_gbps, path);
  m.allreduce_latency_s = positive(j, "allreduce_latency_s", m.allreduce_latency_s, path);
  m.allreduce_gbps = positive(j, "allreduce_gbps", m.allreduce_gbps, path);
  m.threads_per_rank = int(positive(j, "threads_per_rank", m.threads_per_rank, path));
  m.calibrated_ranks_per_node = int(positive(j, "calibrated_ranks_per_node", m.calibrated_ranks_per_node, path));
  m.step_factor = positive(j, "step_factor", m.step_factor, path);
  m.cores_per_node = int(positive(j, "cores_per_node", cores_on_this_node(), path));
  if (j.contains("conv"))
    for (const auto& c : j["conv"]) {
      H3D_USAGE_CHECK(c.is_object() && c.contains("cin") && c.contains("cout") && c.contains("k") &&
                          c.contains("stride") && c.contains("gflops"),
                      "--machine " << path << ": each 'conv' entry needs cin, cout, k, stride and gflops");
      m.conv.push_back(
          {ConvClass{c["cin"].get<int64_t>(), c["cout"].get<int64_t>(), c["k"].get<int>(), c["stride"].get<int>()},
           three_rates(c["gflops"], path)});
    }
  return m;
}

void Machine::save(const std::string& path) const {
  nlohmann::json j = {{"name", name},
                      {"threads_per_rank", threads_per_rank},
                      {"calibrated_ranks_per_node", calibrated_ranks_per_node},
                      {"cores_per_node", cores_per_node > 0 ? cores_per_node : cores_on_this_node()},
                      {"conv_gflops", conv_gflops},
                      {"gemm_gflops", gemm_gflops},
                      {"stream_gbps", stream_gbps},
                      {"pool_gbps", pool_gbps},
                      {"step_factor", step_factor},
                      {"p2p_latency_s", p2p_latency_s},
                      {"p2p_gbps", p2p_gbps},
                      {"allreduce_latency_s", allreduce_latency_s},
                      {"allreduce_gbps", allreduce_gbps}};
  j["conv"] = nlohmann::json::array();
  for (const auto& c : conv)
    j["conv"].push_back(
        {{"cin", c.cls.cin}, {"cout", c.cls.cout}, {"k", c.cls.k}, {"stride", c.cls.stride}, {"gflops", c.gflops}});
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    H3D_USAGE_CHECK(f.good(), "--calibrate: cannot write '" << tmp << "'");
    f << j.dump(2) << "\n";
    H3D_USAGE_CHECK(f.good(), "--calibrate: writing '" << tmp << "' failed");
  }
  H3D_USAGE_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "--calibrate: cannot rename to '" << path << "'");
}

std::string StepTime::limit() const {
  if (halo >= compute && halo >= allreduce) return "halo";
  if (allreduce >= compute) return "allreduce";
  return "compute";
}

StepTime predict_step(const RankReplay& r, const Machine& m, int ranks, int ranks_per_node) {
  StepTime t;
  for (const auto& [cls, flops] : r.work.conv_flops) {
    const auto rate = m.rates(cls);
    for (size_t p = 0; p < 3; ++p) t.compute += flops[p] / (rate[p] * 1e9);
  }
  t.compute += r.work.gemm_flops / (m.gemm_gflops * 1e9) + r.work.stream_bytes / (m.stream_gbps * 1e9) +
               r.work.pool_bytes[0] / (m.pool_gbps[0] * 1e9) + r.work.pool_bytes[1] / (m.pool_gbps[1] * 1e9);
  t.compute *= m.step_factor;
  const int cores = m.cores_per_node > 0 ? m.cores_per_node : cores_on_this_node();
  t.compute *= std::max(1.0, double(ranks_per_node * m.threads_per_rank) / double(cores));
  t.halo = double(r.halo_messages) * m.p2p_latency_s + double(r.halo_bytes) / (m.p2p_gbps * 1e9);
  if (ranks > 1) {
    const double p = ranks;
    t.allreduce =
        2 * (p - 1) / p * double(r.gradient_bytes) / (m.allreduce_gbps * 1e9) + 2 * (p - 1) * m.allreduce_latency_s;
  }
  return t;
}

StepTime predict_step(const std::vector<RankReplay>& ranks, const Machine& m, int world, int ranks_per_node) {
  StepTime worst;
  for (const RankReplay& r : ranks) {
    const StepTime t = predict_step(r, m, world, ranks_per_node);
    if (t.total() > worst.total()) worst = t;
  }
  return worst;
}

namespace {

// Median seconds of `reps` calls after one warm-up.
template <typename F>
double median_seconds(F&& f, int reps = 3) {
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const double t0 = Profiler::now();
    f();
    t.push_back(Profiler::now() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

namespace {

// Real training steps (forward and backward, batch 1, one rank) of the
// network against what the rates predict for them. The side is the
// request's, halved while the step would take more than a quarter of the
// memory this node has.
double measured_step_factor(const MemoryRequest& r, const Machine& m, Backend& be) {
  MemoryRequest one = r;
  one.spatial = {1, 1, 1};
  one.ranks = one.ranks_per_node = 1;
  one.batch_size = 1;
  one.prefetch = false;
  one.data_store_bytes = 0;
  RankReplay replay = replay_rank(one, 0);
  while (replay.memory.tensors() > available_memory_bytes() / 4 && one.extent[0] > 32) {
    for (auto& e : one.extent) e /= 2;
    one.model.input_size = one.extent[0];
    replay = replay_rank(one, 0);
  }
  const Comm self = Comm::self();
  const ProcessGrid grid(self, {1, 1, 1});
  Network net = build_model_for(one.model, one.extent, grid);
  const ActShape& in = net.input_shape();
  // The update the Trainer makes after backward: its gradient check and the
  // optimizer (Adam for 2 state slots, SGD with momentum for 1, plain SGD).
  std::vector<Tensor> slots;
  for (const Param* p : net.params())
    for (int k = 0; k < r.optimizer_slots; ++k) slots.emplace_back(p->value.shape(), 0.0f);
  auto update = [&] {
    size_t k = 0;
    for (Param* p : net.params()) {
      const int64_t n = p->value.numel();
      float* w = p->value.data();
      const float* g = p->grad.data();
      if (!be.all_finite(g, n)) H3D_THROW(Error, "--calibrate: a gradient of the test step is not finite");
      if (r.optimizer_slots >= 2) {
        be.adam_update(AdamStep{0.9f, 0.1f, 0.999f, 0.001f, 0.0f, 1e-6f, 1.0, 1e-8}, n, w, g, slots[k].data(),
                       slots[k + 1].data());
      } else {
        be.sgd_update(SgdStep{1e-6f, 0.0f, 0.9f, false}, n, w, g, r.optimizer_slots == 1 ? slots[k].data() : nullptr);
      }
      k += size_t(r.optimizer_slots);
    }
  };
  std::vector<double> seconds;
  for (int64_t step = 0; step < 4; ++step) {
    Tensor x(be.allocator());
    x.reserve(std::max(net.input_capacity_wish(1), in.channels * one.extent[0] * one.extent[1] * one.extent[2]));
    x.reshape_uninit({1, in.channels, one.extent[0], one.extent[1], one.extent[2]});
    be.fill(x.data(), x.numel(), 0.5f);
    StepContext ctx = make_step_context(&be, &grid, one.model.seed, true, true, step, 0, 1);
    const double t0 = Profiler::now();
    const Tensor& y = net.forward(ctx, std::move(x));
    Tensor dy(be.allocator());
    dy.reshape_uninit(y.shape());
    be.fill(dy.data(), dy.numel(), 1e-3f);
    net.backward(ctx, std::move(dy));
    update();
    seconds.push_back(Profiler::now() - t0);
  }
  std::sort(seconds.begin() + 1, seconds.end());  // the first step builds the kernels
  Machine kernels = m;
  kernels.step_factor = 1.0;
  const double predicted = predict_step(replay, kernels, 1, 1).compute;
  return predicted > 0 ? std::max(1.0, seconds[1 + (seconds.size() - 1) / 2] / predicted) : 1.0;
}

}  // namespace

Machine calibrate(const MemoryRequest& r) {
  MemoryRequest one = r;
  one.spatial = {1, 1, 1};
  one.ranks = 1;
  one.batch_size = 1;
  const RankReplay replay = replay_rank(one, 0);
  std::unique_ptr<Backend> be = make_backend(r.backend);
  Machine m;
  m.threads_per_rank = omp_get_max_threads();
  m.name = "calibrated by hybrid3d plan --calibrate (" + std::to_string(m.threads_per_rank) + " threads per rank)";
  std::vector<double> all[3];
  for (const auto& [cls, largest] : replay.work.largest) {
    // The network's own largest convolution of the class on one rank (batch
    // 1): rates depend on whether the data fits the caches, so a small cube
    // would flatter them. Cut along D to at most 64 Mi floats of data.
    ConvDesc d = largest;
    d.n = 1;
    const int64_t plane = d.cin * d.in[1] * d.in[2] + d.cout * d.out[1] * d.out[2];
    const int64_t max_out = std::max<int64_t>(1, (int64_t(64) << 20) / std::max<int64_t>(1, plane) / cls.stride);
    if (d.out[0] > max_out) {  // the input that gives max_out planes with the same padding
      d.out[0] = max_out;
      d.in[0] = std::max<int64_t>(1, (max_out - 1) * cls.stride + cls.k - d.pad_lo[0] - d.pad_hi[0]);
    }
    Tensor x({d.n, d.cin, d.in[0], d.in[1], d.in[2]}, 0.5f), y({d.n, d.cout, d.out[0], d.out[1], d.out[2]}, 0.5f);
    Tensor w({d.cout, d.cin, int64_t(cls.k), int64_t(d.k[1]), int64_t(d.k[2])}, 0.01f), b({d.cout}, 0.0f);
    Tensor dw(w.shape()), db(b.shape());
    const double flops =
        2.0 * double(d.cin * d.cout) * double(d.k[0] * d.k[1] * d.k[2]) * double(d.out[0] * d.out[1] * d.out[2]);
    Machine::ConvRate rate{cls, {}};
    const float* bias = d.bias ? b.data() : nullptr;
    rate.gflops[0] = flops / median_seconds([&] { be->conv3d_forward(d, x.data(), w.data(), bias, y.data()); }) / 1e9;
    rate.gflops[1] = flops / median_seconds([&] { be->conv3d_backward_data(d, y.data(), w.data(), x.data()); }) / 1e9;
    rate.gflops[2] =
        flops / median_seconds([&] { be->conv3d_backward_weights(d, x.data(), y.data(), dw.data(), db.data()); }) / 1e9;
    for (size_t p = 0; p < 3; ++p) all[p].push_back(rate.gflops[p]);
    m.conv.push_back(rate);
  }
  for (size_t p = 0; p < 3; ++p)
    if (!all[p].empty()) {
      std::sort(all[p].begin(), all[p].end());
      m.conv_gflops[p] = all[p][all[p].size() / 2];
    }
  // The largest pooling, forward and backward (bytes as DryBackend counts them).
  const PoolDesc& pd = replay.work.largest_pool;
  if (pd.n * pd.c > 0) {
    PoolDesc q = pd;
    q.n = 1;
    // Cut along D as the convolutions are (cosmoflow-lbann 512^3's first
    // pooling is 2 Gi floats in, and its three buffers took 17 GiB).
    const int64_t plane = q.c * q.in[1] * q.in[2];
    const int64_t max_out = std::max<int64_t>(1, (int64_t(64) << 20) / std::max<int64_t>(1, plane) / q.stride[0]);
    if (q.out[0] > max_out) {
      q.out[0] = max_out;
      q.in[0] = std::max<int64_t>(1, (max_out - 1) * q.stride[0] + q.k[0] - q.pad_lo[0] - q.pad_hi[0]);
    }
    const int64_t vin = q.in[0] * q.in[1] * q.in[2], vout = q.out[0] * q.out[1] * q.out[2];
    Tensor px({q.c * vin}, 0.5f), py({q.c * vout}, 0.5f), pdx({q.c * vin}, 0.0f);
    m.pool_gbps[0] =
        4.0 * double(q.c * (vin + vout)) / median_seconds([&] { be->pool3d_forward(q, px.data(), py.data()); }) / 1e9;
    m.pool_gbps[1] = 4.0 * double(q.c * (2 * vin + vout)) /
                     median_seconds([&] { be->pool3d_backward(q, px.data(), py.data(), pdx.data()); }) / 1e9;
  }
  // The dense head's GEMM and the memory-bound ops.
  {
    const int64_t g = 512, n = int64_t(16) << 20;
    Tensor a({g, g}, 0.5f), bm({g, g}, 0.5f), c({g, g}, 0.0f), s({n}, 1.0f), t({n}, 1.0f);
    m.gemm_gflops =
        2.0 * double(g * g * g) /
        median_seconds([&] { be->gemm(false, false, g, g, g, 1.0f, a.data(), g, bm.data(), g, 0.0f, c.data(), g); }) /
        1e9;
    m.stream_gbps = 12.0 * double(n) / median_seconds([&] { be->axpy(n, 1.0f, s.data(), t.data()); }) / 1e9;
  }
  BufferPool::instance().trim();  // the kernels' buffers: the real steps below take their own
  m.step_factor = measured_step_factor(r, m, *be);
  return m;
}

namespace {

// Median seconds of one ping-pong's half (a message one way) of n floats
// between ranks 0 and 1; the other ranks wait.
double one_way_seconds(const Comm& world, int64_t n) {
  std::vector<float> buf(size_t(std::max<int64_t>(n, 1)), 1.0f);
  std::vector<double> t;
  for (int rep = 0; rep < 7; ++rep) {
    world.barrier();
    const double t0 = Profiler::now();
    if (world.rank() < 2) {
      const int peer = 1 - world.rank();
      for (int leg = 0; leg < 2; ++leg) {
        Requests reqs;
        if ((leg == 0) == (world.rank() == 0))
          world.isend(buf.data(), n, peer, 71, reqs);
        else
          world.irecv(buf.data(), n, peer, 71, reqs);
        reqs.wait_all();
      }
    }
    t.push_back((Profiler::now() - t0) / 2);
  }
  std::sort(t.begin(), t.end());
  return world.allreduce_max(t[t.size() / 2]);
}

double allreduce_seconds(const Comm& world, int64_t n) {
  std::vector<float> buf(size_t(n), 1.0f);
  std::vector<double> t;
  for (int rep = 0; rep < 7; ++rep) {
    world.barrier();
    const double t0 = Profiler::now();
    world.allreduce_sum(buf.data(), n);
    t.push_back(Profiler::now() - t0);
  }
  std::sort(t.begin(), t.end());
  return world.allreduce_max(t[t.size() / 2]);
}

}  // namespace

void calibrate_network(const Comm& world, Machine& m) {
  if (world.size() < 2) return;
  const int64_t big = int64_t(2) << 20;  // floats: 8 MiB
  const double lat = one_way_seconds(world, 2), one_way = one_way_seconds(world, big);
  m.p2p_latency_s = std::max(lat, 1e-7);
  m.p2p_gbps = 4.0 * double(big) / std::max(one_way - lat, 1e-9) / 1e9;
  // The model's ring: 2 (p - 1) latencies, and 2 (p - 1) / p of the bytes.
  const double p = world.size();
  const int64_t grads = int64_t(4) << 20;  // floats: 16 MiB
  const double small = allreduce_seconds(world, 2), large = allreduce_seconds(world, grads);
  m.allreduce_latency_s = std::max(small / (2 * (p - 1)), 1e-7);
  m.allreduce_gbps = 2 * (p - 1) / p * 4.0 * double(grads) / std::max(large - small, 1e-9) / 1e9;
}

}  // namespace h3d
