// --profile: gathers every rank's Profiler totals and peak memory, and
// reports per step min / median / max over the ranks (printed on rank 0 and
// written as JSON).
#pragma once
#include <string>
#include <vector>

#include "hybrid3d/parallel/process_grid.hpp"

namespace h3d {

// Turns the profiler on with every region of the table declared (so a
// region no step entered reports 0): each layer's forward and backward, the
// halo, allreduce, data, optimizer and step totals. Clears what was timed.
void start_profile(const std::vector<std::string>& layers);

// Collective over the world. `layers` gives the order of the table;
// `steps` the number of steps the totals cover.
void report_profile(const ProcessGrid& grid, const std::vector<std::string>& layers, int64_t steps,
                    const std::string& json_path, bool print);

}  // namespace h3d
