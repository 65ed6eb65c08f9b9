#include "hybrid3d/train/task.hpp"

#include "hybrid3d/models/registry.hpp"

namespace h3d {

// One function per task, each in its own file.
std::unique_ptr<Task> make_regression_task(const TrainOptions& o);
std::unique_ptr<Task> make_segmentation_task(const TrainOptions& o);

std::unique_ptr<Task> make_task(const TrainOptions& o) {
  return is_segmentation(o.model) ? make_segmentation_task(o) : make_regression_task(o);
}

}  // namespace h3d
