#include "hybrid3d/plan/memory_model.hpp"

#include <omp.h>

#include <algorithm>
#include <map>
#include <memory>
#include <sstream>
#include <utility>
#include <vector>

#include "hybrid3d/backend/registry.hpp"
#include "hybrid3d/core/error.hpp"
#include "hybrid3d/plan/gradient_buckets.hpp"
#include "hybrid3d/models/registry.hpp"
#include "hybrid3d/parallel/comm.hpp"
#include "hybrid3d/parallel/process_grid.hpp"
#include "hybrid3d/plan/dry_backend.hpp"

namespace h3d {

namespace {

// The first step fills the pool; the second is the first with a prefetched
// batch handed over; from the third on, every step looks alike (measured:
// the real pool's peak is the same at 3 and at 5 steps).
constexpr int kReplayedSteps = 3;

// Samples of data group g: its share [lo, hi) of the global batch (as Trainer).
std::pair<int64_t, int64_t> group_share(int64_t batch, int groups, int g) {
  return {int64_t(g) * batch / groups, int64_t(g + 1) * batch / groups};
}

// The spatial rank whose block is largest, and among those the one with
// the most neighbours (the most halo): per axis, the largest block, inner
// ones first.
int fullest_block(const Distribution& d) {
  std::array<int, 3> c{};
  for (int a = 0; a < 3; ++a) {
    const auto& b = d.bounds(a);
    const int n = int(b.size()) - 1;
    auto rank_of = [&](int i) { return std::make_pair(b[size_t(i) + 1] - b[size_t(i)], int(i > 0) + int(i < n - 1)); };
    for (int i = 1; i < n; ++i)
      if (rank_of(i) > rank_of(c[size_t(a)])) c[size_t(a)] = i;
  }
  return (c[0] * d.grid()[1] + c[1]) * d.grid()[2] + c[2];
}

// Sets OpenMP's thread count for a scope (0: leaves it), as the run's
// ranks will have it: the backend sizes its kernels' scratchpads by it.
class OmpThreads {
 public:
  explicit OmpThreads(int n) : old_(omp_get_max_threads()) {
    if (n > 0) omp_set_num_threads(n);
  }
  ~OmpThreads() { omp_set_num_threads(old_); }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int old_;
};

}  // namespace

std::string MemoryEstimate::dominant() const {
  const std::pair<const char*, int64_t> parts[] = {
      {"activations", activations},   {"input", input},           {"parameters", parameters},
      {"optimizer state", optimizer}, {"data store", data_store}, {"loader", loader},
      {"MPI buffers", mpi},           {"process", process}};
  const auto* top = &parts[0];
  for (const auto& p : parts)
    if (p.second > top->second) top = &p;
  std::ostringstream os;
  os << top->first << " (" << (total() > 0 ? 100 * top->second / total() : 0) << "%)";
  return os.str();
}

int64_t process_bytes(int ranks_per_node) {
  // Measured on this machine (docs/scaling.md, "Memory"): a rank's peak RSS
  // less its BufferPool peak, without a data store: 42 MiB for cosmoflow
  // 32^3 on 1 rank, 49 MiB per rank for cosmoflow 64^3 on 8.
  constexpr int64_t kBase = int64_t(42) << 20, kPerPeer = int64_t(1) << 20;
  return kBase + kPerPeer * std::max(0, ranks_per_node - 1);
}

RankReplay replay_rank(const MemoryRequest& r, int rank) {
  const Comm world = Comm::simulated(rank, r.ranks);
  const ProcessGrid grid(world, r.spatial);
  H3D_USAGE_CHECK(r.batch_size >= grid.data_groups(),
                  "--batch-size " << r.batch_size << " is smaller than the " << grid.data_groups()
                                  << " data-parallel groups of " << grid.describe());
  // The real backend answers what its kernels would stage. Its own state
  // (oneDNN's primitives for these shapes) goes with it when the replay ends.
  std::unique_ptr<Backend> real = make_backend(r.backend);
  DryBackend dry(*real);
  Network net = build_model_for(r.model, r.extent, grid);

  RankReplay out_replay;
  MemoryEstimate& e = out_replay.memory;
  // floats: the flat vector of the replicated weights, and the parameters
  // held in parts (fc1 on a spatial input: this rank's columns alone).
  int64_t weights = 0, parts = 0;
  for (const Param* p : net.params()) (p->part ? parts : weights) += p->value.numel();
  // Sharded, this rank's shard of the flat parameter vector (the largest:
  // bounds fall on 16 floats), and the gradients that stay whole: those the
  // layer completes itself (no reduce-scatter carries them) and the parts
  // (reduced over the replicas in place, train/sharded_state.hpp).
  const int64_t shard = r.shard_optimizer ? shard_bound(weights, r.ranks, rank + 1) - shard_bound(weights, r.ranks, rank)
                                          : weights;
  const auto reduced = [&](const Param* p) {
    return r.shard_optimizer && p->reduce != GradReduce::kComplete && !p->part;
  };
  int64_t kept_grads = r.shard_optimizer ? shard : 0;
  for (const Param* p : net.params())
    if (!reduced(p)) kept_grads += p->grad.numel();
  e.parameters = (weights + parts + kept_grads) * int64_t(sizeof(float));
  e.optimizer = int64_t(r.optimizer_slots) * (shard + parts) * int64_t(sizeof(float));
  for (const StateBuffer* b : net.buffers()) e.parameters += b->value.numel() * int64_t(sizeof(float));
  // Each gradient is allreduced in place on its own (train/grad_reducer.hpp),
  // and OpenMPI's in-place allreduce takes a temporary buffer of the
  // message's size: the largest gradient's, early in backward, when the
  // saved activations are all alive.
  if (r.ranks > 1)
    for (const Param* p : net.params()) e.mpi = std::max(e.mpi, p->grad.numel() * int64_t(sizeof(float)));
  e.data_store = r.data_store_bytes;
  e.process = process_bytes(r.ranks_per_node);

  const auto [lo, hi] = group_share(r.batch_size, grid.data_groups(), grid.group_index());
  const int64_t n = hi - lo;
  const ActShape& in = net.input_shape();
  const auto ext = in.dist.box(grid.spatial_rank()).extents();
  const std::vector<int64_t> x_shape{n, in.channels, ext[0], ext[1], ext[2]};
  const int64_t wish = std::max(net.input_capacity_wish(n), Tensor::count(x_shape));
  // The parameters' memory as the run holds it, in the same pool and order,
  // so that the pool's reuse and trimming see what the real pool sees:
  // weights, gradients and buffers from the start, optimizer state from the
  // first update on.
  std::vector<Tensor> held;
  auto hold = [&](int64_t floats) {
    held.emplace_back(dry.allocator());
    held.back().reshape_uninit({floats});
  };
  // Sharded, the reduced gradients are given back once the shard is taken
  // (Trainer: ShardedState, then GradientReducer::plan), and are taken
  // again only from their layer's backward until their bucket is complete
  // and reduce-scattered (without the communication thread, as here on
  // one rank; with it, a bucket may wait a little longer for the thread).
  std::map<const Param*, Tensor> grads;
  for (const Param* p : net.params()) {
    hold(p->value.numel());
    grads.emplace(p, Tensor(dry.allocator())).first->second.reshape_uninit({p->grad.numel()});
  }
  for (const StateBuffer* b : net.buffers()) hold(b->value.numel());
  if (r.shard_optimizer) hold(shard);
  for (auto& [p, g] : grads)
    if (reduced(p)) g.release();
  const auto take = [&](const std::vector<Param*>& ps) {
    for (const Param* p : ps)
      if (reduced(p)) grads.at(p).reshape_uninit({p->grad.numel()});
  };
  const std::vector<std::vector<Param*>> buckets = gradient_buckets(net.params_by_layer(), r.bucket_bytes);
  std::map<const Param*, size_t> bucket_of;
  std::vector<size_t> pending(buckets.size());
  for (size_t i = 0; i < buckets.size(); ++i)
    for (const Param* p : buckets[i]) bucket_of[p] = i;
  const auto give = [&](const std::vector<Param*>& ps) {
    for (const Param* p : ps) {
      if (!reduced(p)) continue;
      const size_t i = bucket_of.at(p);
      if (pending[i] == 0) pending[i] = buckets[i].size();  // a new step
      if (--pending[i] == 0)
        for (const Param* q : buckets[i]) grads.at(q).release();
    }
  };
  Tensor next(dry.allocator()), out(dry.allocator());  // the prefetched batch; the trainer's copy of the output
  for (int64_t step = 0; step < kReplayedSteps; ++step) {
    dry.reset_work();  // the work of the last step is what every step does
    const int64_t m0 = grid.group().simulated_messages(), b0 = grid.group().simulated_bytes();
    out_replay.halo_messages = -m0;
    out_replay.halo_bytes = -b0;
    // As Trainer::train_step: the first batch loads in the step, later ones
    // are the prefetched batch handed over; the next batch's buffer is then
    // taken while this step runs (a fresh one: the handed-over buffer went
    // into the network).
    Tensor x(dry.allocator());
    if (r.prefetch && step > 0) {
      x = std::move(next);
    } else {
      x.reserve(wish);
    }
    x.reshape_uninit(x_shape);
    if (r.prefetch) {
      next = Tensor(dry.allocator());
      next.reserve(wish);
    }
    StepContext ctx = make_step_context(&dry, &grid, r.model.seed, true, true, step, lo, n);
    out = net.forward(ctx, std::move(x));
    Tensor dy(dry.allocator());
    dy.reshape_uninit(out.shape());
    net.backward(ctx, std::move(dy), give, take);
    out_replay.halo_messages += grid.group().simulated_messages();
    out_replay.halo_bytes += grid.group().simulated_bytes();
    // The optimizer's slots, one per parameter (sharded: per slice of a
    // parameter in this rank's shard), from the first update on.
    if (step == 0) {
      const int64_t lo = shard_bound(weights, r.ranks, rank), hi = lo + shard;
      int64_t start = 0;
      for (const Param* p : net.params()) {
        if (p->part) {
          for (int k = 0; k < r.optimizer_slots; ++k) hold(p->value.numel());
          continue;
        }
        const int64_t end = start + p->value.numel();
        const int64_t n = r.shard_optimizer ? std::min(end, hi) - std::max(start, lo) : p->value.numel();
        start = end;
        if (n > 0)
          for (int k = 0; k < r.optimizer_slots; ++k) hold(n);
      }
    }
    // Sharded, the new weights are allgathered through a buffer of a
    // bucket's size (ShardedState::allgather_weights).
    if (r.shard_optimizer) {
      Tensor chunk(dry.allocator());
      chunk.reshape_uninit({std::min(weights, std::max<int64_t>(1, r.bucket_bytes / int64_t(sizeof(float))))});
    }
  }
  e.input = r.prefetch ? wish * int64_t(sizeof(float)) : 0;
  e.loader = r.loader_bytes_per_value * Tensor::count(x_shape) / std::max<int64_t>(1, n);  // one sample at a time
  const int64_t spatial_ranks = int64_t(r.spatial[0]) * r.spatial[1] * r.spatial[2];
  e.loader = std::max(e.loader, r.generator_bytes_per_voxel * r.extent[0] * r.extent[1] * r.extent[2] / spatial_ranks);
  const BufferPool::Stats pool = dry.pool().stats();
  e.activations = pool.peak_bytes - e.input - e.parameters - e.optimizer;
  out_replay.work = dry.work();
  // The optimizer update (not replayed): reads weights, gradients and
  // state, writes weights and state.
  out_replay.work.stream_bytes += double(3 + 2 * r.optimizer_slots) * double((shard + parts) * int64_t(sizeof(float)));
  // What the world's reduction carries (the parts go over the replicas alone, not counted).
  out_replay.gradient_bytes = weights * int64_t(sizeof(float));
  return out_replay;
}

std::vector<RankReplay> replay_layout(const MemoryRequest& r) {
  H3D_USAGE_CHECK(r.ranks >= 1, "a layout needs at least one rank");
  const int S = r.spatial[0] * r.spatial[1] * r.spatial[2];
  H3D_USAGE_CHECK(S >= 1 && r.ranks % S == 0, "spatial " << r.spatial[0] << "x" << r.spatial[1] << "x" << r.spatial[2]
                                                         << " does not divide " << r.ranks << " ranks");
  // The last data group has the most samples (its share rounds up).
  const int last_group = (r.ranks / S - 1) * S;
  const Network net = build_model(r.model);
  const Distribution d = Distribution::balanced(r.extent, r.spatial, net.alignment());
  const OmpThreads threads(r.threads);
  std::vector<RankReplay> out{replay_rank(r, last_group)};
  const int fullest = fullest_block(d);
  if (fullest != 0) out.push_back(replay_rank(r, last_group + fullest));
  return out;
}

}  // namespace h3d
