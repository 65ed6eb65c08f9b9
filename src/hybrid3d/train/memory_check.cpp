#include "hybrid3d/train/memory_check.hpp"

#include <cstdio>
#include <sstream>

#include "hybrid3d/core/bytes.hpp"
#include "hybrid3d/core/error.hpp"
#include "hybrid3d/data/cache_budget.hpp"
#include "hybrid3d/models/registry.hpp"
#include "hybrid3d/train/optimizer.hpp"

namespace h3d {

PlanRequest plan_request(const TrainOptions& o, int ranks, int ranks_per_node) {
  PlanRequest r;
  MemoryRequest& m = r.base;
  m.model = o.model;
  const int64_t s = o.model.input_size;
  m.extent = {s, s, s};
  m.batch_size = o.batch_size;
  m.spatial = o.spatial;
  m.ranks = ranks;
  m.ranks_per_node = ranks_per_node;
  m.optimizer_slots = make_optimizer(o.optimizer)->slots();
  const bool segmentation = is_segmentation(o.model);
  m.prefetch = o.prefetch && (o.data != "synthetic" || segmentation);  // as Trainer
  m.backend = o.backend;
  // The data store may fill its budget (synthetic sets: at most every
  // sample's block, as floats).
  int64_t store = o.data_store_mib >= 0 ? int64_t(o.data_store_mib * double(1 << 20))
                                        : default_cache_bytes(m.ranks_per_node);
  if (o.data == "synthetic") {
    const int64_t blocks = (o.train_samples + o.val_samples) * s * s * s * model_in_channels(o.model) * 4;
    store = std::min(store, blocks / (o.spatial[0] * o.spatial[1] * o.spatial[2]));
  }
  m.data_store_bytes = store;
  r.memory_per_rank = o.memory_per_rank > 0 ? o.memory_per_rank : node_memory_per_rank(m.ranks_per_node);
  if (!o.machine.empty()) r.machine = Machine::load(o.machine);
  return r;
}

namespace {

std::string fitting_list(const std::vector<LayoutPlan>& plans) {
  std::ostringstream os;
  int n = 0;
  for (const LayoutPlan& p : plans)
    if (p.fits && n++ < 4)
      os << (n > 1 ? ", " : "") << "--spatial " << p.name() << " (" << format_bytes(p.memory.total()) << ")";
  return n ? os.str() : "";
}

}  // namespace

std::array<int, 3> choose_layout(const PlanRequest& r) {
  const std::vector<LayoutPlan> plans = plan_layouts(r);
  const LayoutPlan* best = fastest_fitting(plans);
  H3D_USAGE_CHECK(!plans.empty(), "--spatial auto: the network accepts no layout of " << r.base.ranks << " ranks");
  H3D_USAGE_CHECK(best, "--spatial auto: no layout of " << r.base.ranks << " ranks fits "
                                                        << format_bytes(r.memory_per_rank) << " per rank (the "
                                                        << "smallest needs " << [&] {
                                                             int64_t least = plans[0].memory.total();
                                                             for (const auto& p : plans)
                                                               least = std::min(least, p.memory.total());
                                                             return format_bytes(least);
                                                           }() << "); use more ranks or a smaller batch");
  return best->spatial;
}

void check_memory(const PlanRequest& r, const TrainOptions& o, bool say) {
  const LayoutPlan p = plan_layout(r);
  if (p.fits) return;
  std::ostringstream why;
  why << "predicted peak memory per rank " << format_bytes(p.memory.total()) << " for --spatial " << p.name()
      << " exceeds the " << format_bytes(r.memory_per_rank) << " each rank has"
      << (o.memory_per_rank > 0 ? " (--memory-per-rank)" : " (available memory over the node's ranks)")
      << "; the largest part is " << p.memory.dominant();
  if (o.force) {
    if (say) std::fprintf(stderr, "hybrid3d: warning: %s; running anyway (--force)\n", why.str().c_str());
    return;
  }
  const std::string fit = fitting_list(plan_layouts(r));
  H3D_THROW(UsageError, why.str() << "; " << (fit.empty() ? "no layout of " + std::to_string(r.base.ranks) +
                                                                   " ranks fits: use more ranks or a smaller batch"
                                                             : "layouts that fit: " + fit)
                                  << " (hybrid3d plan lists them all; --force runs anyway)");
}

}  // namespace h3d
