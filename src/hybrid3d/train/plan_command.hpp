// `hybrid3d plan`: every layout of a job's ranks with its predicted peak
// memory per rank and step time, fastest first, the fastest that fits
// marked (plan/planner.hpp); or, with --calibrate FILE, this machine's
// rates for the model's convolutions written as a machine file.
#pragma once
#include <string>

#include "hybrid3d/parallel/comm.hpp"
#include "hybrid3d/train/plan_options.hpp"

namespace h3d {

// Rank 0 prints; the others only wait.
void run_plan(const Comm& world, const PlanOptions& o);

}  // namespace h3d
