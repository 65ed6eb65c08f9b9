// Threads per rank, from what the launcher gave the rank: its CPU affinity
// mask (mpirun binds each rank to a core by default; Slurm gives each task
// --cpus-per-task CPUs) and the node's cores shared among its ranks. A rank
// asked to run more threads than its mask has CPUs runs them time-sliced on
// those CPUs (1.8x the step time at 2 threads on 1 core): that gets one
// warning for the job, naming the mpirun options that fix it.
#pragma once
#include <string>

namespace h3d {

class Comm;

// CPUs in this process's affinity mask (sched_getaffinity); the node's
// logical cores where the mask cannot be read.
int cpus_in_affinity_mask();

// What a rank sees of its machine, and what it was asked for.
struct ThreadRequest {
  int requested = 0;           // --threads (0: not given)
  int omp_num_threads = 0;     // OMP_NUM_THREADS (0: unset or not a number)
  int mask_cpus = 1;           // cpus_in_affinity_mask()
  int node_cores = 1;          // cores_on_this_node()
  int node_ranks = 1;          // ranks_on_this_node()
  bool binding_asked = false;  // the user chose a binding (mpirun
                               // --bind-to/--map-by, Slurm --cpu-bind)
};

struct ThreadChoice {
  int threads = 1;
  // Empty, or one line saying why this rank runs slower than it could and
  // which launcher options fix it.
  std::string warning;
};

// --threads, else OMP_NUM_THREADS, else the CPUs of the rank's mask, at most
// the node's cores / its ranks (a mask of the whole node is shared). Warns
// when the threads exceed the mask's CPUs, and when the launcher's default
// binding leaves the rank fewer CPUs than its share of the node.
ThreadChoice choose_threads(const ThreadRequest &r);

// choose_threads for this rank (from --threads `requested`, the environment
// and the machine), set as OpenMP's thread count. The lowest rank with a
// warning prints it once for the job, to stderr. Collective on `world`.
// Returns the thread count.
int set_rank_threads(const Comm &world, int requested);

}  // namespace h3d
