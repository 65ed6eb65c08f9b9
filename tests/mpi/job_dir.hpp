// One scratch directory for the whole MPI job: rank 0 makes it under
// $TMPDIR (or /tmp) and every rank learns its name. Empty if it could not
// be made (on every rank).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>

#include "hybrid3d/parallel/comm.hpp"

namespace h3d::test {

inline std::string job_dir(const Comm& world, const char* prefix) {
  char dir[256] = {};
  if (world.rank() == 0) {
    const char* tmp = std::getenv("TMPDIR");
    std::snprintf(dir, sizeof dir, "%s/%s_XXXXXX", tmp ? tmp : "/tmp", prefix);
    if (!mkdtemp(dir)) dir[0] = 0;
  }
  world.bcast(dir, sizeof dir, 0);
  return dir;
}

}  // namespace h3d::test
