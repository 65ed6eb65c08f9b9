// A network's weights in a safetensors file with its PyTorch names: read
// (--init, predict) and written (--save). Checkpoints (train/checkpoint.hpp)
// hold more: the optimizer state and checksums too.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "hybrid3d/models/network.hpp"
#include "hybrid3d/parallel/process_grid.hpp"
#include "hybrid3d/train/safetensors.hpp"

namespace h3d {

// Loads every parameter of `net` (and the state buffers present) from a
// safetensors file with the network's PyTorch names; UsageError naming
// `flag` for a missing tensor or a wrong shape.
void load_network_weights(Network& net, const std::string& path, const char* flag);

// Every parameter (whole) and state buffer of `net`, as files hold them, on
// world rank 0: the parameters held in parts are gathered into `wholes`,
// which the result points into. Collective over the world.
std::vector<NamedTensor> whole_model_tensors(Network& net, const ProcessGrid& grid, std::vector<Tensor>& wholes);

// Writes every parameter and state buffer of `net` to `path` from world
// rank 0, with `metadata` in the header. Collective over the world.
void save_network_weights(Network& net, const ProcessGrid& grid, const std::string& path,
                          const std::map<std::string, std::string>& metadata);

// Collective: throws unless every rank holds bitwise the same weights as
// the others that should (all ranks; for a parameter held in parts, the
// ranks of the same part), a fingerprint of their bits compared.
void require_identical_replicas(Network& net, const ProcessGrid& grid);

}  // namespace h3d
