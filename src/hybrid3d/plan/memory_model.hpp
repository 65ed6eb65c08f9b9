// The memory model: what one rank of a layout holds at its peak, found by
// replaying training steps of the real network on a DryBackend (no compute,
// tensors of untouched address space) over a simulated communicator, so
// that the estimate is the network's own memory plan, not a formula beside
// it: activations kept for backward and freed as soon as the plan allows,
// halo-padded copies grown in place, halo message buffers, ReLU sign masks,
// gradients, the kernels' staging copies (Backend::conv3d_staging), the
// pool's reuse and slack, and the input batch (and the prefetched next one).
// Weights, gradients and optimizer state are counted from the parameters;
// the data store from its budget; the process itself (code, MPI, oneDNN's
// scratch) from a constant measured on this machine (docs/scaling.md).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "hybrid3d/models/model_options.hpp"
#include "hybrid3d/plan/dry_backend.hpp"

namespace h3d {

struct MemoryRequest {
  ModelOptions model;
  std::array<int64_t, 3> extent{};  // voxels of a sample per axis
  int64_t batch_size = 1;
  std::array<int, 3> spatial{1, 1, 1};
  int ranks = 1;                 // the job's ranks; data groups = ranks / (D*H*W)
  int ranks_per_node = 1;        // ranks sharing a node (MPI's shared-memory buffers)
  int optimizer_slots = 1;       // state tensors per parameter (Optimizer::slots)
  // --shard-optimizer: each rank holds 1/ranks of the optimizer state and of
  // the reduced gradients, and a full gradient only from its layer's
  // backward to its reduce-scatter (train/sharded_state.hpp).
  bool shard_optimizer = false;
  int64_t bucket_bytes = int64_t(8) << 20;  // --allreduce-bucket-mib
  bool prefetch = true;          // the next batch loads while the step runs
  int64_t data_store_bytes = 0;  // what the rank's sample caches may hold
  // Bytes per value the loader reads a sample's block into before it
  // converts it to floats (CosmoFlow files: int16 counts, 2; 0: it reads
  // floats in place).
  int loader_bytes_per_value = 0;
  // Synthetic universes: bytes per voxel of the whole sample that the
  // generator's distributed FFT holds while it makes one (shared by the
  // spatial ranks; 0: not synthetic).
  int generator_bytes_per_voxel = 0;
  // OpenMP threads of each rank (oneDNN's scratchpads grow with them);
  // 0: this process's current count.
  int threads = 0;
  std::string backend = "cpu";
};

// Bytes per rank at the peak (the largest over the ranks replayed).
struct MemoryEstimate {
  int64_t activations = 0;  // the step's tensors: activations, gradients, halo buffers, masks, staging
  int64_t input = 0;        // the prefetched next batch
  int64_t parameters = 0;   // weights and their gradients
  int64_t optimizer = 0;    // optimizer state
  int64_t data_store = 0;   // samples kept in memory
  int64_t loader = 0;       // the loader's read buffer (outside the pool)
  int64_t mpi = 0;          // MPI's temporary buffer of the largest allreduce
  int64_t process = 0;      // the process itself: code, MPI, oneDNN
  // What --profile reports as peak tensors (the BufferPool's peak).
  int64_t tensors() const { return activations + input + parameters + optimizer; }
  // The peak resident set.
  int64_t total() const { return tensors() + data_store + loader + mpi + process; }
  // The largest part, as "activations (72%)".
  std::string dominant() const;
};

// The process's own resident memory besides tensors and caches, with
// `ranks_per_node` ranks on its node (measured: docs/scaling.md).
int64_t process_bytes(int ranks_per_node);

// What replaying one rank found: its memory, and the work of its second
// step (what the time model prices).
struct RankReplay {
  MemoryEstimate memory;
  StepWork work;
  int64_t halo_messages = 0, halo_bytes = 0;  // sent by this rank in one step
  int64_t gradient_bytes = 0;                 // reduced over the world each step
};

// One rank (world rank `rank`) of the layout, replayed for two steps.
RankReplay replay_rank(const MemoryRequest& r, int rank);
inline MemoryEstimate estimate_rank_memory(const MemoryRequest& r, int rank) { return replay_rank(r, rank).memory; }
// The ranks of the layout that hold the most and work the most: the data
// group with the most samples; its first block and its largest, most
// interior block. Throws UsageError if the network cannot take the layout
// (naming the layer, as train does).
std::vector<RankReplay> replay_layout(const MemoryRequest& r);

}  // namespace h3d
