#include "hybrid3d/plan/planner.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hybrid3d/core/bytes.hpp"
#include "hybrid3d/core/error.hpp"

namespace h3d {

std::string layout_name(const std::array<int, 3>& spatial) {
  return std::to_string(spatial[0]) + "x" + std::to_string(spatial[1]) + "x" + std::to_string(spatial[2]);
}

int64_t node_memory_per_rank(int ranks_per_node) { return available_memory_bytes() / std::max(1, ranks_per_node); }

LayoutPlan plan_layout(const PlanRequest& r) {
  LayoutPlan p;
  p.spatial = r.base.spatial;
  p.data_groups = r.base.ranks / (p.spatial[0] * p.spatial[1] * p.spatial[2]);
  const std::vector<RankReplay> ranks = replay_layout(r.base);
  for (const RankReplay& rr : ranks)
    if (rr.memory.total() > p.memory.total()) p.memory = rr.memory;
  p.time = predict_step(ranks, r.machine, r.base.ranks, r.base.ranks_per_node);
  p.fits = p.memory.total() <= r.memory_per_rank;
  return p;
}

std::vector<std::array<int, 3>> candidate_layouts(int ranks, int64_t batch) {
  std::vector<std::array<int, 3>> out;
  for (int s = ranks; s >= 1; --s) {
    if (ranks % s != 0 || ranks / s > batch) continue;
    for (int d = 1; d <= s; ++d)
      for (int h = 1; h <= s / d; ++h)
        if (s % (d * h) == 0) out.push_back({d, h, s / (d * h)});
  }
  return out;
}

std::vector<LayoutPlan> plan_layouts(const PlanRequest& r, std::vector<std::string>* refused) {
  std::vector<LayoutPlan> out;
  for (const auto& spatial : candidate_layouts(r.base.ranks, r.base.batch_size)) {
    PlanRequest one = r;
    one.base.spatial = spatial;
    try {
      out.push_back(plan_layout(one));
    } catch (const UsageError& e) {
      if (refused) refused->push_back(layout_name(spatial) + ": " + e.what());
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const LayoutPlan& a, const LayoutPlan& b) { return a.time.total() < b.time.total(); });
  return out;
}

const LayoutPlan* fastest_fitting(const std::vector<LayoutPlan>& plans) {
  for (const LayoutPlan& p : plans)
    if (p.fits) return &p;
  return nullptr;
}

std::string plan_table(const PlanRequest& r, const std::vector<LayoutPlan>& plans,
                       const std::vector<std::string>& refused) {
  std::ostringstream os;
  const MemoryRequest& b = r.base;
  os << b.model.model << " " << b.extent[0] << "x" << b.extent[1] << "x" << b.extent[2] << ", batch " << b.batch_size
     << ", " << b.ranks << " ranks (" << b.ranks_per_node << " per node), " << format_bytes(r.memory_per_rank)
     << " per rank\n";
  os << "machine: " << r.machine.name << "\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-10s %6s %12s %10s %8s %8s %8s  %-5s %s\n", "spatial", "groups", "peak/rank",
                "step s", "compute", "halo", "allred", "fits", "largest part");
  os << line;
  const LayoutPlan* best = fastest_fitting(plans);
  for (const LayoutPlan& p : plans) {
    std::snprintf(line, sizeof line, "%s %-10s %6d %12s %10.3f %8.3f %8.3f %8.3f  %-5s %s\n", &p == best ? "*" : " ",
                  p.name().c_str(), p.data_groups, format_bytes(p.memory.total()).c_str(), p.time.total(),
                  p.time.compute, p.time.halo, p.time.allreduce, p.fits ? "yes" : "no", p.memory.dominant().c_str());
    os << line;
  }
  os << "\n";
  if (best)
    os << "* fastest that fits: --spatial " << best->name() << " (" << best->data_groups << " data group"
       << (best->data_groups > 1 ? "s" : "") << "), predicted " << format_bytes(best->memory.total())
       << " per rank and " << best->time.total() << " s per step\n";
  else if (!plans.empty())
    os << "no layout of " << b.ranks << " ranks fits " << format_bytes(r.memory_per_rank)
       << " per rank: use more ranks, a smaller batch, or a machine with more memory\n";
  for (const std::string& s : refused) os << "not possible: " << s << "\n";
  return os.str();
}

std::string plan_json(const std::vector<LayoutPlan>& plans) {
  nlohmann::json a = nlohmann::json::array();
  const LayoutPlan* best = fastest_fitting(plans);
  for (const LayoutPlan& p : plans) {
    const MemoryEstimate& m = p.memory;
    a.push_back({{"spatial", p.name()},
                 {"data_groups", p.data_groups},
                 {"peak_rss_bytes", m.total()},
                 {"step_seconds", p.time.total()},
                 {"fits", p.fits},
                 {"chosen", &p == best},
                 {"memory_bytes",
                  {{"activations", m.activations},
                   {"input", m.input},
                   {"parameters", m.parameters},
                   {"optimizer", m.optimizer},
                   {"data_store", m.data_store},
                   {"loader", m.loader},
                   {"mpi", m.mpi},
                   {"process", m.process}}},
                 {"seconds", {{"compute", p.time.compute}, {"halo", p.time.halo}, {"allreduce", p.time.allreduce}}},
                 {"limited_by", p.time.limit()}});
  }
  return a.dump(2);
}

}  // namespace h3d
