// A network's weights from a safetensors file with its PyTorch names
// (--init, predict). Checkpoints (train/checkpoint.hpp) load more: the
// optimizer state and checksums too.
#pragma once
#include <string>

#include "hybrid3d/models/network.hpp"

namespace h3d {

// Loads every parameter of `net` (and the state buffers present) from a
// safetensors file with the network's PyTorch names; UsageError naming
// `flag` for a missing tensor or a wrong shape.
void load_network_weights(Network& net, const std::string& path, const char* flag);

}  // namespace h3d
