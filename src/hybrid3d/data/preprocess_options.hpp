// The options of `hybrid3d preprocess` (data/preprocess.hpp).
#pragma once
#include <cstdint>
#include <string>

namespace h3d {

struct PreprocessOptions {
  std::string in, out;
  int64_t sample_size = 0;       // side of each sub-volume (0: whole universes)
  std::string layout = "original";  // original: (D, H, W, C); lbann: (C, D, H, W)
  std::string dtype;             // int16 | float32 (default: int16 original, float32 lbann)
  int64_t samples_per_file = 1;
  int64_t chunk = 0;             // chunk side in D, H and W (0: contiguous)
  int compress = 0;              // gzip level 1..9 (needs --chunk)
  bool quiet = false;
};

}  // namespace h3d
