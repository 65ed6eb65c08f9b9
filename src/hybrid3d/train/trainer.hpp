// Trainer: one training job over a ProcessGrid.
//
// Per step: the sampler picks the global mini-batch (the same sample ids
// whatever the layout); each data group takes its contiguous share of it and
// each rank loads only its block of those samples; forward; the MSE loss is
// the mean over the global mini-batch; backward; gradients are completed
// across ranks; every rank applies the same optimizer update.
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "hybrid3d/backend/backend.hpp"
#include "hybrid3d/data/sample_source.hpp"
#include "hybrid3d/models/cosmoflow.hpp"
#include "hybrid3d/data/prefetcher.hpp"
#include "hybrid3d/data/sampler.hpp"
#include "hybrid3d/train/grad_reducer.hpp"
#include "hybrid3d/train/checkpoint.hpp"
#include "hybrid3d/train/lr_schedule.hpp"
#include "hybrid3d/train/metrics.hpp"
#include "hybrid3d/train/optimizer.hpp"
#include "hybrid3d/train/seg_loss.hpp"
#include "hybrid3d/train/train_options.hpp"

namespace h3d {

class DataStore;


struct ValidationResult {
  double mse = 0;  // regression
  std::array<double, 4> mse_per_param{}, mae_per_param{};
  std::vector<double> dice, iou;  // segmentation, per class
  double accuracy = 0;
  int64_t samples = 0;
};

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
  ValidationResult validate() { return evaluate(val_src_.get()); }
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
  // The loss of the global mini-batch and its gradient w.r.t. output_.
  double loss_and_gradient(int64_t step);
  std::vector<int64_t> global_batch(int64_t step) const;
  void local_range(int64_t& lo, int64_t& hi) const;
  // The ids this rank's data group loads at `step`.
  std::vector<int64_t> local_batch(int64_t step) const;
  // The context of step `step` (dropout masks, batch positions, halo
  // overlap); evaluation (validation, test) takes it with training false.
  StepContext step_context(int64_t step, bool training) const;
  void open_data(const Comm& world, const Comm& group);
  // What a checkpoint records of this run, and what a resume must match.
  nlohmann::json run_info() const;
  void resume_from_checkpoint(const Comm& world);
  LoadedCheckpoint load_checkpoint_on_root(const Comm& world, const std::string& path);
  void checkpoint(int64_t steps_done);

  TrainOptions o_;
  std::unique_ptr<ProcessGrid> grid_;
  std::unique_ptr<Backend> backend_;
  Network net_;
  std::shared_ptr<SampleSource> train_src_, val_src_, test_src_;
  const DataStore* store_ = nullptr;  // the training data's, if any
  std::unique_ptr<TrainSampler> sampler_;
  std::unique_ptr<Optimizer> opt_;
  GradientReducer reducer_;
  MetricsLog metrics_;
  Box block_;
  int64_t steps_per_epoch_ = 1, total_steps_ = 0;
  Tensor input_, output_, dout_;
  std::vector<float> targets_;
  std::vector<int32_t> labels_;  // segmentation: targets_ as class labels
  bool segmentation_ = false;
  bool augmented_ = false;  // training ids carry the epoch (AugmentedSource)
  std::unique_ptr<Prefetcher> prefetch_;  // null: load in the step
  double last_data_wait_ = 0;
  int64_t start_step_ = 0;  // > 0 after a resume
  int64_t last_checkpoint_step_ = 0;  // the newest checkpoint written or resumed from (0: none)
  bool stopped_by_signal_ = false;
  int64_t skipped_steps_ = 0;
  bool last_skipped_ = false;
  // The first parameter, in backward order, whose gradient is not finite ("" if none).
  std::string first_nonfinite_gradient();
  // Where a non-finite loss at `step` began: the input or the first layer
  // whose output is not finite (a replay of the step's forward pass).
  std::string where_nonfinite(int64_t step);
};

}  // namespace h3d
