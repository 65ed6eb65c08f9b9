// Where a non-finite loss or gradient came from, so that exit 3 names it:
// the first parameter (in backward order) whose gradient is not finite, or,
// for the loss, the first layer whose output is not finite in a replay of
// the step's forward pass (or the input data itself).
#pragma once
#include <functional>
#include <string>

#include "hybrid3d/core/tensor.hpp"
#include "hybrid3d/layers/layer.hpp"
#include "hybrid3d/models/network.hpp"
#include "hybrid3d/parallel/comm.hpp"

namespace h3d {

// "" if every gradient is finite on every rank, else the name of the first
// parameter (in backward order) with one that is not, on any rank: those
// held in parts differ between ranks. Collective over `world`.
std::string first_nonfinite_gradient(const Network& net, Backend& backend, const Comm& world);

// Runs `net` forward on `x` (the step's own input, in the step's context:
// the same data, weights and dropout masks) and says where non-finite
// values first appear on any rank of `world`. Collective.
std::string where_nonfinite(Network& net, const StepContext& ctx, Tensor x, const Comm& world);

}  // namespace h3d
