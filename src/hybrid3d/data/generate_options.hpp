// The options of `hybrid3d generate` (data/universe_writer.hpp).
#pragma once
#include <cstdint>
#include <string>

namespace h3d {

struct GenerateOptions {
  std::string kind = "cosmoflow";  // cosmoflow | segmentation
  std::string out;
  int64_t count = 1, size = 0, first_index = 0;
  uint64_t seed = 0;
  int ranks_per_universe = 0;  // 0: all ranks
  bool quiet = false;
};

}  // namespace h3d
