#include "hybrid3d/train/plan_command.hpp"

#include <algorithm>
#include <cstdio>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/train/memory_check.hpp"

namespace h3d {

void run_plan(const Comm& world, const PlanOptions& o) {
  H3D_USAGE_CHECK(o.ranks >= 0 && o.ranks_per_node >= 0, "--ranks and --ranks-per-node must be positive");
  const int ranks = o.ranks > 0 ? o.ranks : world.size();
  PlanRequest r = plan_request(o.job, ranks, o.ranks_per_node > 0 ? std::min(o.ranks_per_node, ranks) : ranks);
  r.base.threads = r.machine.threads_per_rank;  // the ranks' threads, not this process's
  if (!o.calibrate.empty()) {
    // Every rank of the job measures at once, so that the rates are those
    // of a rank sharing the node (memory bandwidth, caches) with as many
    // others as the run will have: `mpirun -np K hybrid3d plan --calibrate`.
    world.barrier();
    Machine m = calibrate(r.base);
    m.calibrated_ranks_per_node = world.size();
    calibrate_network(world, m);
    m.name = "calibrated by hybrid3d plan --calibrate (" + std::to_string(m.threads_per_rank) + " threads per rank, " +
             std::to_string(world.size()) + " ranks measuring at once)";
    world.barrier();
    if (world.rank() != 0) return;
    m.save(o.calibrate);
    std::printf(
        "wrote %s: %zu convolution classes of %s; default GFLOP/s forward %.1f, backward data %.1f, "
        "backward weights %.1f; GEMM %.1f GFLOP/s; stream %.1f GB/s; a real step %.2fx its kernels; point to "
        "point %.1f us and %.2f GB/s, allreduce %.1f us and %.2f GB/s\n",
        o.calibrate.c_str(), m.conv.size(), o.job.model.model.c_str(), m.conv_gflops[0], m.conv_gflops[1],
        m.conv_gflops[2], m.gemm_gflops, m.stream_gbps, m.step_factor, 1e6 * m.p2p_latency_s, m.p2p_gbps,
        1e6 * m.allreduce_latency_s, m.allreduce_gbps);
    return;
  }
  if (world.rank() != 0) return;
  std::vector<std::string> refused;
  const std::vector<LayoutPlan> plans = plan_layouts(r, &refused);
  H3D_USAGE_CHECK(!plans.empty(), "no layout of " << r.base.ranks << " ranks can split " << o.job.model.model
                                                  << (refused.empty() ? "" : ": " + refused.front()));
  const std::string text = o.json ? plan_json(plans) + "\n" : plan_table(r, plans, refused);
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace h3d
