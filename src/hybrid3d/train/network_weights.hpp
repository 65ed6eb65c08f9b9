// A network's weights in a safetensors file with its PyTorch names: read
// (--init, predict) and written (--save). Checkpoints (train/checkpoint.hpp)
// hold more: the optimizer state and checksums too.
#pragma once
#include <map>
#include <string>

#include "hybrid3d/models/network.hpp"
#include "hybrid3d/parallel/comm.hpp"

namespace h3d {

// Loads every parameter of `net` (and the state buffers present) from a
// safetensors file with the network's PyTorch names; UsageError naming
// `flag` for a missing tensor or a wrong shape.
void load_network_weights(Network& net, const std::string& path, const char* flag);

// Writes every parameter and state buffer of `net` to `path`, with
// `metadata` in the header (call on one rank: the weights are replicated).
void save_network_weights(Network& net, const std::string& path, const std::map<std::string, std::string>& metadata);

// Collective: throws unless every rank of `world` holds bitwise the same
// weights (a fingerprint of their bits compared over the ranks).
void require_identical_replicas(Network& net, const Comm& world);

}  // namespace h3d
