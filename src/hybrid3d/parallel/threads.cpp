#include "hybrid3d/parallel/threads.hpp"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/parallel/comm.hpp"

namespace h3d {

int cpus_in_affinity_mask() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cores_on_this_node();
  return std::max(1, CPU_COUNT(&set));
}

namespace {

// A positive integer, or 0 (OpenMP's own lists like "4,2" take their first).
int leading_positive(const char *s) {
  if (!s || !*s) return 0;
  char *end = nullptr;
  const long v = std::strtol(s, &end, 10);
  return (end != s && v > 0 && v < 1 << 20) ? int(v) : 0;
}

// Whether the user chose how ranks are placed, rather than taking the
// launcher's default (OpenMPI exports these only when asked on the command
// line or in its configuration; Slurm when the job names CPUs per task).
bool binding_asked_in_environment() {
  for (const char *v : {"OMPI_MCA_hwloc_base_binding_policy", "OMPI_MCA_rmaps_base_mapping_policy", "SLURM_CPU_BIND",
                        "SLURM_CPUS_PER_TASK"})
    if (std::getenv(v)) return true;
  return false;
}

std::string cpus(int n) { return std::to_string(n) + (n == 1 ? " CPU" : " CPUs"); }

}  // namespace

ThreadChoice choose_threads(const ThreadRequest &r) {
  const int share = std::max(1, r.node_cores / std::max(1, r.node_ranks));
  ThreadChoice c;
  if (r.requested > 0)
    c.threads = r.requested;
  else if (r.omp_num_threads > 0)
    c.threads = r.omp_num_threads;
  else
    c.threads = std::max(1, std::min(r.mask_cpus, share));
  const auto fix = [](int n) {
    return "start it with `mpirun --bind-to none` or `mpirun --map-by "
           "slot:PE=" +
           std::to_string(n) + "` (Slurm: `srun --cpus-per-task=" + std::to_string(n) + "`)";
  };
  if (c.threads > r.mask_cpus) {
    c.warning = std::to_string(c.threads) + " threads run on the " + cpus(r.mask_cpus) +
                " this rank's affinity mask allows (mpirun binds each rank to one core "
                "unless told otherwise), "
                "so they take turns and every step is slower: " +
                fix(c.threads) + ", or run --threads " + std::to_string(r.mask_cpus);
  } else if (r.requested == 0 && r.omp_num_threads == 0 && !r.binding_asked && r.mask_cpus < share) {
    c.warning = "this rank may use " + cpus(r.mask_cpus) + " of the " + std::to_string(share) +
                " cores that are its share of the node (mpirun binds each rank "
                "to one core unless told otherwise), "
                "so it runs " +
                std::to_string(c.threads) + (c.threads == 1 ? " thread" : " threads") + "; to use " +
                std::to_string(share) + ", " + fix(share);
  }
  return c;
}

int set_rank_threads(const Comm &world, int requested) {
  if (requested < 0) H3D_THROW(UsageError, "--threads must be positive");
  ThreadRequest r;
  r.requested = requested;
  r.omp_num_threads = leading_positive(std::getenv("OMP_NUM_THREADS"));
  r.mask_cpus = cpus_in_affinity_mask();
  r.node_cores = cores_on_this_node();
  r.node_ranks = ranks_on_this_node(world);
  r.binding_asked = binding_asked_in_environment();
  const ThreadChoice c = choose_threads(r);
  omp_set_num_threads(c.threads);
  const int first = world.allreduce_min(c.warning.empty() ? world.size() : world.rank());
  if (first == world.rank()) {
    std::fprintf(stderr, "hybrid3d: warning (rank %d): %s\n", world.rank(), c.warning.c_str());
    std::fflush(stderr);
  }
  return c.threads;
}

}  // namespace h3d
