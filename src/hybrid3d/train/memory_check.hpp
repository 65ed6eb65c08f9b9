// What the planner (plan/planner.hpp) does for a training job before its
// first step: `--spatial auto` picks the fastest layout predicted to fit,
// and every run checks that its layout's predicted per-rank peak fits the
// memory each rank has (--memory-per-rank, else the node's available memory
// or cgroup limit over its ranks), refusing in seconds with the estimate and
// the layouts that would fit instead of meeting the kernel's OOM killer
// after minutes (--force runs anyway).
#pragma once
#include <array>

#include "hybrid3d/plan/planner.hpp"
#include "hybrid3d/train/train_options.hpp"

namespace h3d {

// The job of `o` on `ranks` ranks, `ranks_per_node` of them per node, as
// the planner sees it.
PlanRequest plan_request(const TrainOptions& o, int ranks, int ranks_per_node);
// --spatial auto: the fastest layout that fits; UsageError if none does.
std::array<int, 3> choose_layout(const PlanRequest& r);
// UsageError unless o.spatial's predicted peak fits (or --force, which
// only warns, when `say`). One rank computes it (the Trainer: rank 0).
void check_memory(const PlanRequest& r, const TrainOptions& o, bool say);

}  // namespace h3d
