// GradientReducer: completes every parameter's gradient across the job so
// that all ranks hold the same global gradient.
//   kPartialSum      -> summed over all ranks
//   kGroupReplicated -> only each group's spatial root contributes (the
//                       others add zeros), so the sum runs over data groups
//   kComplete        -> left alone (the layer already reduced it)
//   kReplicaSum      -> summed over the replicas (ranks of the same spatial
//                       rank): a part (Param::part) is complete within its
//                       group. Parts are reduced in finish(), outside the
//                       buckets (the world's ranks hold different ones);
//                       without a part the group is one rank and the
//                       replicas are the world.
//
// Gradients go into buckets of about `bucket_bytes`, in the order backward
// finishes them (plan/gradient_buckets.hpp). Backward calls
// ready() after each layer; a bucket whose gradients are all final is
// handed to a communication thread, which allreduces its gradients in
// place (no packing: nobody touches a final gradient before the optimizer)
// on a communicator of its own while backward goes on. finish() waits for
// the thread. A thread rather than MPI_Iallreduce + MPI_Test:
// OpenMPI advances a non-blocking collective only inside MPI calls (a 36 MiB
// one needs hundreds of thousands of tests on shared memory), and one test
// per layer cannot drive it.
//
// The thread's copies and sums are CPU work on shared memory, and it polls
// while it waits for a slower rank (MPI is told to yield while polling, see
// mpi_init). Where the compute threads already oversubscribe the node's
// cores, adding it costs more than it hides, so kAuto overlaps only when
// this node's ranks x threads fit its cores (measured in
// docs/performance.md). Without MPI_THREAD_MULTIPLE, or with overlap off,
// every bucket is reduced in finish(), blocking.
//
// With a ShardedState (--shard-optimizer) each gradient is reduce-scattered
// instead: each rank receives the sum of its shard's part of it, and the
// full gradient goes back to the pool (needed() takes it again before its
// layer's next backward). Without the thread, a bucket is then reduced in
// ready(), as soon as it is final, so that the full gradients are not all
// alive at once.
//
// Profile: allreduce.exposed is the time backward's thread spends in
// ready() and finish() (handing over, waiting); allreduce.total is
// the time the communication thread spends in MPI_Allreduce.
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "hybrid3d/parallel/comm.hpp"
#include "hybrid3d/parallel/process_grid.hpp"
#include "hybrid3d/layers/layer.hpp"
#include "hybrid3d/train/sharded_state.hpp"
#include "hybrid3d/train/train_options.hpp"

namespace h3d {

class GradientReducer {
 public:
  GradientReducer() = default;
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Collective over the world. `layers`: each layer's parameters, in
  // network order. `threads_per_rank`: the compute threads of each rank.
  // `shards`: reduce-scatter into it (null: allreduce in place).
  void plan(const ProcessGrid& grid, const std::vector<std::vector<Param*>>& layers, int64_t bucket_bytes,
            Overlap overlap, int threads_per_rank, ShardedState* shards = nullptr);
  // These parameters' gradients are about to be written (their layer's
  // backward starts): with shards, takes back those given to the pool.
  void needed(const std::vector<Param*>& params);
  // These parameters' gradients are final for this step.
  void ready(const std::vector<Param*>& params);
  // Every gradient reduced and back in Param::grad; resets for the next step.
  void finish();
  // Whether buckets are reduced while backward runs.
  bool overlapping() const { return worker_.joinable(); }

 private:
  struct Bucket {
    std::vector<Param*> params;
    int pending = 0;  // parameters not final yet (-1: reduced in ready(), sharded without the thread)
  };
  // Zeroes what this rank must not contribute (replicated gradients off
  // the group root).
  void prepare(Bucket& b);
  void reduce(const Comm& comm, Bucket& b);
  void reduce_scatter(const Comm& comm, Bucket& b);
  // The parameters held in parts, over the replicas (blocking).
  void reduce_parts();
  void enqueue(size_t i);
  void work();

  const ProcessGrid* grid_ = nullptr;
  ShardedState* shards_ = nullptr;
  Comm comm_;  // the world, duplicated: the thread's collectives are its own
  std::vector<Bucket> buckets_;
  std::vector<Param*> parts_;  // held in parts: summed over the replicas in finish()
  std::unordered_map<const Param*, size_t> bucket_of_;
  size_t enqueued_ = 0;

  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> queue_;
  size_t reduced_ = 0;
  double seconds_ = 0;  // in MPI_Allreduce since the last finish()
  bool stop_ = false;
  std::exception_ptr failure_;
};

}  // namespace h3d
