// Task: what a kind of model learns and how it is judged, apart from how it
// is trained (Trainer: the loop) and how it is built (models/).
//
//   regression (cosmoflow, cosmoflow-lbann): 4 parameters per sample, MSE;
//     evaluation: MSE and MAE per parameter.
//   segmentation (unet3d): a class score per voxel, cross-entropy and/or
//     Dice (train/seg_loss.hpp); evaluation: Dice and IoU per class, voxel
//     accuracy.
//
// A new task is one class here and one line in make_task.
#pragma once
#include <array>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hybrid3d/backend/backend.hpp"
#include "hybrid3d/core/tensor.hpp"
#include "hybrid3d/data/sample_source.hpp"
#include "hybrid3d/parallel/process_grid.hpp"
#include "hybrid3d/train/train_options.hpp"

namespace h3d {

struct ValidationResult {
  double mse = 0;  // regression
  std::array<double, 4> mse_per_param{}, mae_per_param{};
  std::vector<double> dice, iou;  // segmentation, per class
  double accuracy = 0;
  int64_t samples = 0;
};

class Task {
 public:
  virtual ~Task() = default;
  // UsageError unless `data` suits the task (labels, their classes).
  virtual void validate(const SampleSource& data) const = 0;
  // The loss of the global mini-batch, and its gradient w.r.t. `output`
  // for this rank's part in `dout`. `targets`: what the source loaded for
  // this rank's block of its samples. Collective over the grid's world.
  // The per-element work runs on `backend`.
  virtual double loss(Backend& backend, const ProcessGrid& grid, const Tensor& output, const std::vector<float>& targets,
                      Tensor& dout) = 0;

  // An evaluation pass: begin, add every mini-batch (this rank's samples of
  // it, `weights[s]` 1 for a real sample, 0 for padding), then finish
  // (collective), which reduces over the world.
  virtual void eval_begin() = 0;
  virtual void eval_add(const Tensor& output, const std::vector<float>& targets, const std::vector<float>& weights) = 0;
  virtual ValidationResult eval_finish(const ProcessGrid& grid) = 0;
  // The result as one log line ("validation at step 12: ...") and as one
  // metrics record (JSON; the caller adds type and step).
  virtual std::string report(const ValidationResult& r) const = 0;
  virtual nlohmann::json record(const ValidationResult& r) const = 0;
};

// The task of o.model (is_segmentation), with its loss options.
std::unique_ptr<Task> make_task(const TrainOptions& o);

}  // namespace h3d
