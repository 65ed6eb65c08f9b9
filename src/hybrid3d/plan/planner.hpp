// The layout search: every layout of a job's ranks that the network accepts
// (data groups x D x H x W), each with its predicted per-rank peak memory
// (plan/memory_model.hpp) and step time (plan/time_model.hpp), fastest
// first, and whether it fits the memory each rank has. `hybrid3d plan`
// prints it; `train --spatial auto` takes the fastest that fits; every
// train checks its own layout against it before the first step.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "hybrid3d/plan/memory_model.hpp"
#include "hybrid3d/plan/time_model.hpp"

namespace h3d {

// "2x1x1".
std::string layout_name(const std::array<int, 3>& spatial);

struct LayoutPlan {
  std::array<int, 3> spatial{1, 1, 1};
  int data_groups = 1;
  MemoryEstimate memory;
  StepTime time;
  bool fits = false;
  std::string name() const { return layout_name(spatial); }
};

struct PlanRequest {
  MemoryRequest base;  // the job; its spatial is what plan_layouts varies
  int64_t memory_per_rank = 0;
  Machine machine;
};

// The memory each of `ranks_per_node` ranks of this node may use.
int64_t node_memory_per_rank(int ranks_per_node);

// One layout (base.spatial).
LayoutPlan plan_layout(const PlanRequest& r);
// The spatial splits of `ranks` that leave no data group without one of
// `batch` samples, most spatial ranks first.
std::vector<std::array<int, 3>> candidate_layouts(int ranks, int64_t batch);
// Every layout of base.ranks that the network accepts and that leaves no
// data group without a sample, fastest first. `refused` (if given) gets a
// line for each layout the network cannot take.
std::vector<LayoutPlan> plan_layouts(const PlanRequest& r, std::vector<std::string>* refused = nullptr);
// The fastest layout that fits (null: none does).
const LayoutPlan* fastest_fitting(const std::vector<LayoutPlan>& plans);

// The table `hybrid3d plan` prints, and its --json form (one array).
std::string plan_table(const PlanRequest& r, const std::vector<LayoutPlan>& plans,
                       const std::vector<std::string>& refused);
std::string plan_json(const std::vector<LayoutPlan>& plans);

}  // namespace h3d
