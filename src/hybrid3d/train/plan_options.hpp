// The options of `hybrid3d plan` (light: the command line fills it).
#pragma once
#include <string>

#include "hybrid3d/train/train_options.hpp"

namespace h3d {

struct PlanOptions {
  TrainOptions job;        // the model, batch, optimizer, data, memory, machine and backend flags
  int ranks = 0;           // 0: the ranks of this job
  int ranks_per_node = 0;  // 0: all of them on one node
  bool json = false;
  std::string calibrate;  // a machine file to write
};

}  // namespace h3d
