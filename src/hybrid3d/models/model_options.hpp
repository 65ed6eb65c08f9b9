// The options that choose and size a model (light: the command line fills it).
#pragma once
#include <cstdint>
#include <string>

namespace h3d {

struct ModelOptions {
  std::string model = "cosmoflow";  // a name in models/registry.hpp
  int64_t input_size = 128;
  int64_t in_channels = 0;  // 0: the model's own (4 for cosmoflow, 1 for unet3d)
  int64_t classes = 3, base_channels = 32;  // unet3d only
  int levels = 3;                           // unet3d only
  int kernel_size = 2;  // cosmoflow only
  bool batchnorm = false;
  float dropout = 0.0f;
  uint64_t seed = 0;
};


}  // namespace h3d
