#include "hybrid3d/train/grad_reducer.hpp"

#include <algorithm>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/core/profiler.hpp"
#include "hybrid3d/plan/gradient_buckets.hpp"

namespace h3d {

GradientReducer::~GradientReducer() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

namespace {

// Whether this node's compute threads fit its cores. Collective.
bool node_fits_threads(const Comm& world, int threads_per_rank) {
  return int64_t(ranks_on_this_node(world)) * threads_per_rank <= cores_on_this_node();
}

}  // namespace

void GradientReducer::plan(const ProcessGrid& grid, const std::vector<std::vector<Param*>>& layers,
                           int64_t bucket_bytes, Overlap overlap, int threads_per_rank, ShardedState* shards) {
  H3D_CHECK(!worker_.joinable(), "GradientReducer::plan called twice");
  grid_ = &grid;
  shards_ = shards;
  buckets_.clear();
  bucket_of_.clear();
  parts_.clear();
  for (const auto& params : layers)
    for (auto* p : params) {
      H3D_CHECK(p->reduce != GradReduce::kReplicaSum || p->part || grid.spatial_size() == 1,
                "parameter " << p->name << " is summed over the replicas but is held whole");
      if (p->part && p->reduce == GradReduce::kReplicaSum) parts_.push_back(p);
    }
  for (auto& params : gradient_buckets(layers, bucket_bytes)) {
    buckets_.emplace_back();
    buckets_.back().params = std::move(params);
    for (auto* p : buckets_.back().params) bucket_of_[p] = buckets_.size() - 1;
  }
  for (auto& b : buckets_) {
    b.pending = int(b.params.size());
    // Sharded, a reduced gradient exists only from its layer's backward to
    // its reduce-scatter (needed() takes it).
    if (shards_)
      for (auto* p : b.params) p->grad.release();
  }
  const Comm& world = grid.world();
  if (world.size() == 1 || overlap == Overlap::kOff) return;
  // Every rank must decide alike: the thread's collectives pair up.
  bool threaded = mpi_thread_multiple() && (overlap == Overlap::kOn || node_fits_threads(world, threads_per_rank));
  threaded = world.allreduce_sum(int64_t(threaded ? 0 : 1)) == 0;
  if (!threaded) return;
  comm_ = world.dup();
  worker_ = std::thread([this] { work(); });
}

void GradientReducer::prepare(Bucket& b) {
  if (grid_->is_group_root()) return;
  for (auto* p : b.params)
    if (p->reduce == GradReduce::kGroupReplicated) p->grad.fill(0.0f);
}

void GradientReducer::reduce(const Comm& comm, Bucket& b) {
  if (shards_) return reduce_scatter(comm, b);
  for (auto* p : b.params) comm.allreduce_sum(p->grad.data(), p->grad.numel());
}

void GradientReducer::reduce_scatter(const Comm& comm, Bucket& b) {
  // One parameter at a time, like the allreduce: its flat range is one run,
  // so each rank's part lands straight in its shard, with no packed copy of
  // the bucket (that copy would be the peak's largest gradient again).
  for (auto* p : b.params) {
    const int64_t s = shards_->start_of(p);
    const std::vector<int> counts = shards_->owned_counts(s, s + p->grad.numel());
    const int64_t a = std::max(s, shards_->lo(comm.rank()));
    comm.reduce_scatter_sum(p->grad.data(), counts[size_t(comm.rank())] > 0 ? shards_->shard_grad(a) : nullptr,
                            counts);
    p->grad.release();  // ZeRO stage 2: the full gradient is not kept
  }
}

void GradientReducer::reduce_parts() {
  const Comm& replicas = grid_->replicas();
  if (replicas.size() == 1) return;
  ProfileScope comm(prof::kAllreduceTotal);
  for (auto* p : parts_) replicas.allreduce_sum(p->grad.data(), p->grad.numel());
}

void GradientReducer::needed(const std::vector<Param*>& params) {
  if (!shards_) return;
  for (auto* p : params)
    if (p->grad.empty()) p->grad.reshape_uninit(p->value.shape());
}

void GradientReducer::enqueue(size_t i) {
  prepare(buckets_[i]);
  ++enqueued_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(i);
  }
  cv_.notify_all();
}

void GradientReducer::work() {
  for (;;) {
    size_t i;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      i = queue_.front();
      queue_.pop_front();
    }
    const double t0 = Profiler::now();
    std::exception_ptr err;
    try {
      reduce(comm_, buckets_[i]);
    } catch (...) {
      err = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      seconds_ += Profiler::now() - t0;
      ++reduced_;
      if (err && !failure_) failure_ = err;
    }
    cv_.notify_all();
  }
}

void GradientReducer::ready(const std::vector<Param*>& params) {
  // Sharded, a bucket is reduced as soon as it is final even without the
  // thread: its full gradients then go back to the pool while backward's
  // activations are still alive (the peak), not after.
  if (!overlapping() && !shards_) return;
  ProfileScope timed(prof::kAllreduceExposed);
  for (auto* p : params) {
    auto it = bucket_of_.find(p);
    if (it == bucket_of_.end()) continue;
    if (--buckets_[it->second].pending > 0) continue;
    if (overlapping()) {
      enqueue(it->second);
    } else {
      Bucket& b = buckets_[it->second];
      prepare(b);
      ProfileScope comm(prof::kAllreduceTotal);
      reduce(grid_->world(), b);
      b.pending = -1;  // done: finish() skips it
    }
  }
}

void GradientReducer::finish() {
  ProfileScope timed(prof::kAllreduceExposed);
  if (overlapping()) {
    // Buckets whose parameters were never reported (a layer without
    // backward) go now, in bucket order on every rank.
    for (size_t i = 0; i < buckets_.size(); ++i)
      if (buckets_[i].pending > 0) {
        buckets_[i].pending = 0;
        enqueue(i);
      }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return reduced_ == enqueued_; });
    Profiler::instance().add(prof::kAllreduceTotal, seconds_);
    seconds_ = 0;
    if (failure_) std::rethrow_exception(failure_);
  } else {
    for (auto& b : buckets_) {
      if (b.pending < 0) continue;  // reduced in ready()
      prepare(b);
      ProfileScope comm(prof::kAllreduceTotal);
      reduce(grid_->world(), b);
    }
  }
  reduce_parts();
  for (auto& b : buckets_) b.pending = int(b.params.size());
  enqueued_ = 0;
  std::lock_guard<std::mutex> lock(mu_);
  reduced_ = 0;
}

}  // namespace h3d
