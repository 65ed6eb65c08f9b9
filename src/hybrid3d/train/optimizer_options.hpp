// The optimizer and its hyper-parameters (train/optimizer.hpp has the update rules).
#pragma once
#include <string>

namespace h3d {

struct OptimizerOptions {
  std::string kind = "sgd";
  double momentum = 0.9, weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};

}  // namespace h3d
