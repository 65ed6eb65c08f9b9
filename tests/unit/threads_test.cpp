// Threads per rank (parallel/threads.hpp): the count follows --threads, then
// OMP_NUM_THREADS, then the rank's affinity mask within its share of the
// node; a rank whose threads exceed its CPUs, or whom the launcher's default
// binding left below its share, gets a warning naming the mpirun options.
#include <gtest/gtest.h>

#include "hybrid3d/parallel/threads.hpp"

using namespace h3d;

namespace {

ThreadRequest machine(int mask, int cores, int ranks) {
  ThreadRequest r;
  r.mask_cpus = mask;
  r.node_cores = cores;
  r.node_ranks = ranks;
  return r;
}

bool names_fix(const std::string &w) {
  return w.find("--bind-to none") != std::string::npos && w.find("--map-by slot:PE=") != std::string::npos;
}

}  // namespace

TEST(Threads, DefaultFollowsTheMaskWithinTheNodeShare) {
  // Unbound (mask = the node): the node's cores shared among its ranks.
  EXPECT_EQ(choose_threads(machine(16, 16, 4)).threads, 4);
  EXPECT_EQ(choose_threads(machine(2, 2, 1)).threads, 2);
  EXPECT_EQ(choose_threads(machine(2, 2, 8)).threads,
            1);  // oversubscribed: never 0
  // Bound to a core each (mpirun's default for 1-2 ranks), or PE=4 /
  // --cpus-per-task=4.
  EXPECT_EQ(choose_threads(machine(1, 2, 2)).threads, 1);
  EXPECT_EQ(choose_threads(machine(4, 16, 4)).threads, 4);
  // Bound to a socket shared by 4 ranks: the share, not the socket's 8 CPUs.
  EXPECT_EQ(choose_threads(machine(8, 16, 4)).threads, 4);
  for (const auto &r : {machine(16, 16, 4), machine(1, 2, 2), machine(4, 16, 4), machine(8, 16, 4)})
    EXPECT_EQ(choose_threads(r).warning, "") << r.mask_cpus << " " << r.node_cores << " " << r.node_ranks;
}

TEST(Threads, AskedForOverridesTheDefault) {
  ThreadRequest r = machine(8, 8, 1);
  r.omp_num_threads = 3;
  EXPECT_EQ(choose_threads(r).threads, 3);
  r.requested = 5;  // --threads wins over OMP_NUM_THREADS
  EXPECT_EQ(choose_threads(r).threads, 5);
  EXPECT_EQ(choose_threads(r).warning, "");
}

TEST(Threads, MoreThreadsThanTheMaskWarns) {
  ThreadRequest r = machine(1, 2, 1);  // `mpirun -np 1 ... --threads 2` bound to one core
  r.requested = 2;
  const ThreadChoice c = choose_threads(r);
  EXPECT_EQ(c.threads, 2);
  EXPECT_TRUE(names_fix(c.warning)) << c.warning;
  EXPECT_NE(c.warning.find("PE=2"), std::string::npos) << c.warning;
  EXPECT_NE(c.warning.find("--threads 1"), std::string::npos) << c.warning;
  r.requested = 0;
  r.omp_num_threads = 2;  // the same through the environment
  EXPECT_TRUE(names_fix(choose_threads(r).warning));
  r.binding_asked = true;  // asked for, the binding still starves the threads
  EXPECT_TRUE(names_fix(choose_threads(r).warning));
}

TEST(Threads, DefaultBindingBelowTheShareWarnsUnlessAskedFor) {
  ThreadRequest r = machine(1, 2, 1);  // `mpirun -np 1 hybrid3d train`: one core of two
  ThreadChoice c = choose_threads(r);
  EXPECT_EQ(c.threads, 1);
  EXPECT_TRUE(names_fix(c.warning)) << c.warning;
  EXPECT_NE(c.warning.find("PE=2"), std::string::npos) << c.warning;
  r.binding_asked = true;  // `--bind-to core` said on purpose: the user's choice, no warning
  c = choose_threads(r);
  EXPECT_EQ(c.threads, 1);
  EXPECT_EQ(c.warning, "");
}
