// Moving a parameter held in parts (Param::part) to and from its whole
// value: what checkpoints, --init and --save exchange (always the whole
// tensor, so files do not depend on the layout).
#pragma once
#include <vector>

#include "hybrid3d/layers/layer.hpp"
#include "hybrid3d/parallel/comm.hpp"

namespace h3d {

// This rank's part of `whole` (p's whole [rows, cols] matrix) into `part`
// ([rows, columns]). For a parameter without parts: a copy.
void take_part(const Param& p, const float* whole, float* part);
// For a parameter held in parts: the whole value from every rank's part
// (`part`: a [rows, columns] array of this rank's, the value or an
// optimizer slot), on rank 0 of `group` (the spatial group); empty on the
// others. Collective over `group`.
std::vector<float> gather_whole(const Comm& group, const Param& p, const float* part);
// For a parameter held in parts: every rank's part of the whole value that
// `comm`'s rank 0 holds in
// `whole` (ignored elsewhere), sent in pieces of a few MiB so that no rank
// but the root holds the whole. Collective over `comm`.
void scatter_whole(const Comm& comm, const Param& p, const float* whole, float* part);

}  // namespace h3d
