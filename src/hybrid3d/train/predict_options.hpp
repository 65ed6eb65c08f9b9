// The options of `hybrid3d predict`, for either kind of model (train/predictor.hpp,
// train/regression_predictor.hpp).
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "hybrid3d/models/model_options.hpp"

namespace h3d {

struct PredictOptions {
  ModelOptions model;  // segmentation: input_size is the window side; regression: the sample side
  std::array<int, 3> spatial{1, 1, 1};
  std::string init, out, backend = "cpu";
  bool halo_overlap = true;  // halo exchange behind each block's interior (as train's --halo-overlap)
  bool quiet = false;
  // Segmentation: one case, cut into windows.
  std::string input, intensity_window;
  double window_overlap = 0.5;  // the share of a window's side its neighbour covers too
  bool probabilities = false;
  // Regression (train/regression_predictor.hpp): every sample of a dataset.
  std::string data, transform = "log1p", read_mode = "independent";
  int64_t batch_size = 0;  // global, over the data groups (0: one per data group)
};

}  // namespace h3d
