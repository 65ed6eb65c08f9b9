// Trainer: one training job over a ProcessGrid: the loop.
//
// Per step: the sampler picks the global mini-batch (the same sample ids
// whatever the layout); each data group takes its contiguous share of it and
// each rank loads only its block of those samples; forward; the task's loss
// over the global mini-batch (train/task.hpp); backward; gradients are
// completed across ranks; every rank applies the same optimizer update (or,
// with --shard-optimizer, its shard of it, and the weights are allgathered).
// What it composes: the data (train/train_data.hpp), the task, the model
// (models/), the gradient reducer, the checkpoints
// (train/checkpoint_manager.hpp) and the non-finite guard.
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "hybrid3d/backend/backend.hpp"
#include "hybrid3d/data/prefetcher.hpp"
#include "hybrid3d/data/sample_source.hpp"
#include "hybrid3d/data/sampler.hpp"
#include "hybrid3d/models/network.hpp"
#include "hybrid3d/train/checkpoint_manager.hpp"
#include "hybrid3d/train/grad_reducer.hpp"
#include "hybrid3d/train/metrics.hpp"
#include "hybrid3d/train/optimizer.hpp"
#include "hybrid3d/train/sharded_state.hpp"
#include "hybrid3d/train/task.hpp"
#include "hybrid3d/train/train_data.hpp"
#include "hybrid3d/train/train_options.hpp"

namespace h3d {

class Trainer {
 public:
  // Collective. Validates everything (flags, layout against every layer,
  // data shapes, --init file) before returning.
  Trainer(const Comm& world, TrainOptions o);
  ~Trainer();

  void run();                         // the whole job: steps, validation, --save
  // run() ended early on SIGTERM / SIGINT (after a checkpoint, if any).
  bool stopped_by_signal() const { return stopped_by_signal_; }
  double train_step(int64_t step);    // one step; returns the global loss
  ValidationResult validate() { return evaluate(data_.val.get()); }
  // Every sample of `src` once (null: nothing).
  ValidationResult evaluate(SampleSource* src);

  Network& network() { return net_; }
  const ProcessGrid& grid() const { return *grid_; }
  const Tensor& last_input() const { return input_; }
  const Tensor& last_output() const { return output_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t total_steps() const { return total_steps_; }
  void save(const std::string& path);
  // Throws unless every rank holds bitwise the same weights.
  void check_replicas_identical();

 private:
  void load_batch(SampleSource& src, const std::vector<int64_t>& ids, Tensor& x, std::vector<float>& targets);
  // This rank's data group's share [lo, hi) of every global mini-batch.
  void local_range(int64_t& lo, int64_t& hi) const;
  // The ids this rank's data group loads at `step`.
  std::vector<int64_t> local_batch(int64_t step) const;
  // The context of step `step` (dropout masks, batch positions, halo
  // overlap); evaluation (validation, test) takes it with training false.
  StepContext step_context(int64_t step, bool training) const;
  // What a checkpoint records of this run, and what a resume must match.
  nlohmann::json run_info() const;
  // Says `line` on rank 0 (unless --quiet).
  void say(const std::string& line) const;
  // Evaluates `src` (if any), prints it as `what` and records it as `type`.
  void report_evaluation(SampleSource* src, const char* what, const char* type, int64_t step);
  // After step `step`: the progress line, validation, a stop by signal or by
  // --stop-after, checkpoints. Returns true if the run stops here.
  bool after_step(int64_t step, double loss, double seconds);

  TrainOptions o_;
  std::unique_ptr<ProcessGrid> grid_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Task> task_;
  Network net_;
  TrainingData data_;
  std::unique_ptr<TrainSampler> sampler_;
  std::unique_ptr<Optimizer> opt_;
  std::unique_ptr<ShardedState> shards_;  // --shard-optimizer (null: replicated)
  std::unique_ptr<CheckpointManager> checkpoints_;
  GradientReducer reducer_;
  MetricsLog metrics_;
  Box block_;
  int64_t steps_per_epoch_ = 1, total_steps_ = 0;
  Tensor input_, output_, dout_;
  std::vector<float> targets_;
  std::unique_ptr<Prefetcher> prefetch_;  // null: load in the step
  double last_data_wait_ = 0;
  int64_t start_step_ = 0;  // > 0 after a resume
  bool stopped_by_signal_ = false, last_skipped_ = false;
  int64_t skipped_steps_ = 0;
  // The progress line's window: seconds and steps since the last line.
  double window_s_ = 0;
  int64_t window_steps_ = 0;
  double started_ = 0;  // Profiler::now() when run() began
};

}  // namespace h3d
