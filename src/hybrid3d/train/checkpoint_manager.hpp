// CheckpointManager: a training run's checkpoints (train/checkpoint.hpp has
// the files): the checks before the first step, --resume (rank 0 reads and
// verifies, every rank gets the state over MPI), and writing when due: every
// --checkpoint-every steps, every --checkpoint-minutes (rank 0's clock, for
// every rank alike), at the end, and before a stop. A failed write is a
// CheckpointError on every rank, naming the newest intact checkpoint.
#pragma once
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "hybrid3d/models/network.hpp"
#include "hybrid3d/parallel/comm.hpp"
#include "hybrid3d/parallel/process_grid.hpp"
#include "hybrid3d/train/optimizer.hpp"
#include "hybrid3d/train/sharded_state.hpp"
#include "hybrid3d/train/train_options.hpp"

namespace h3d {

class CheckpointManager {
 public:
  // Collective over the grid's world. Checks the checkpoint flags, creates
  // --checkpoint-dir and refuses one without room for one checkpoint.
  // `run_info`: what a checkpoint records of this run (a resume must match
  // its model, optimizer, seed and batch size).
  // `shards`: the optimizer's state is sharded there (null: replicated).
  CheckpointManager(const ProcessGrid& grid, const TrainOptions& o, Network& net, Optimizer& opt, nlohmann::json run_info,
                    const ShardedState* shards = nullptr);

  bool enabled() const { return !o_.checkpoint_dir.empty(); }
  // --resume: loads the checkpoint into the network and optimizer and
  // returns its step (0: none, a fresh start). Collective.
  int64_t resume(int64_t total_steps);
  // After step `steps_done` of `total`: writes a checkpoint if one is due.
  // Returns true if this job should stop here (--stop-after). Collective.
  bool after_step(int64_t steps_done, int64_t start_step, int64_t total);
  // Writes one now (collective); CheckpointError if it cannot be written.
  void write(int64_t steps_done);

 private:
  const ProcessGrid& grid_;
  const Comm& world_;
  const TrainOptions& o_;
  Network& net_;
  Optimizer& opt_;
  const ShardedState* shards_;
  nlohmann::json run_info_;
  int64_t last_step_ = 0;  // the newest checkpoint written or resumed from (0: none)
  std::chrono::steady_clock::time_point last_time_ = std::chrono::steady_clock::now();
};

}  // namespace h3d
