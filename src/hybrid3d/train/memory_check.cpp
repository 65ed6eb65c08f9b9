#include "hybrid3d/train/memory_check.hpp"

#include <algorithm>
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
  m.shard_optimizer = o.shard_optimizer;
  m.bucket_bytes = std::max<int64_t>(1, int64_t(o.bucket_mib * double(1 << 20)));
  const bool segmentation = is_segmentation(o.model);
  m.prefetch = o.prefetch && (o.data != "synthetic" || segmentation);  // as Trainer
  // CosmoFlow files hold int16 counts, read into a buffer of their own
  // (data/hdf5_source.cpp); segmentation volumes are read as floats in place.
  m.loader_bytes_per_value = o.data != "synthetic" && !segmentation ? 2 : 0;
  // The synthetic universe generator (data/synthetic_universe.cpp) holds, per
  // voxel of the cube, its FFT field (8 bytes of double), the int16 slab of
  // 4 channels (8) and the slab-to-block exchange's send and receive
  // buffers (8 each).
  m.generator_bytes_per_voxel = o.data == "synthetic" && !segmentation ? 32 : 0;
  m.backend = o.backend;
  // The data store may fill its budget (synthetic sets: at most every
  // sample's block, as floats).
  int64_t store =
      o.data_store_mib >= 0 ? int64_t(o.data_store_mib * double(1 << 20)) : default_cache_bytes(m.ranks_per_node);
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

// Up to 3 layouts of the job that fit, looked for from the most spatial
// ranks down, so that a refusal comes in seconds: a rank's share of the
// batch's voxels is the same whatever the split, and fewer spatial ranks
// only save halos, so once a whole level of them has no fit, none below will.
std::string fitting_list(const PlanRequest& r) {
  std::ostringstream os;
  int n = 0, level = 0, level_valid = 0, level_fits = 0;
  for (const auto& spatial : candidate_layouts(r.base.ranks, r.base.batch_size)) {
    const int s = spatial[0] * spatial[1] * spatial[2];
    if (s != level) {
      if (level_valid && !level_fits) break;
      level = s;
      level_valid = level_fits = 0;
    }
    PlanRequest one = r;
    one.base.spatial = spatial;
    try {
      const LayoutPlan p = plan_layout(one);
      ++level_valid;
      if (p.fits) {
        os << (n++ ? ", " : "") << "--spatial " << p.name() << " (" << format_bytes(p.memory.total()) << ")";
        ++level_fits;
      }
    } catch (const UsageError&) {  // the network cannot take it
    }
    if (n == 3) break;
  }
  return os.str();
}

}  // namespace

std::array<int, 3> choose_layout(const PlanRequest& r) {
  const std::vector<LayoutPlan> plans = plan_layouts(r);
  H3D_USAGE_CHECK(!plans.empty(), "--spatial auto: the network accepts no layout of " << r.base.ranks << " ranks");
  const LayoutPlan* best = fastest_fitting(plans);
  if (best) return best->spatial;
  int64_t least = plans[0].memory.total();
  for (const LayoutPlan& p : plans) least = std::min(least, p.memory.total());
  H3D_THROW(UsageError, "--spatial auto: no layout of " << r.base.ranks << " ranks fits "
                                                        << format_bytes(r.memory_per_rank) << " per rank (the smallest "
                                                        << "needs " << format_bytes(least)
                                                        << "); use more ranks or a smaller batch");
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
  const std::string fit = fitting_list(r);
  H3D_THROW(UsageError, why.str() << "; "
                                  << (fit.empty() ? "no layout of " + std::to_string(r.base.ranks) +
                                                        " ranks fits: use more ranks or a smaller batch"
                                                  : "layouts that fit: " + fit)
                                  << " (hybrid3d plan lists them all; --force runs anyway)");
}

}  // namespace h3d
