// Creating an output directory for a whole job: one rank creates it (with
// its parents, as mkdir -p), every rank learns the outcome, so a failure is
// one clear error on all ranks instead of one rank failing while the others
// wait.
#pragma once
#include <string>

#include "hybrid3d/dist/comm.hpp"

namespace h3d {

// Collective over `comm` (rank 0 creates). Throws UsageError on every rank,
// naming `flag` and `path`, if the directory cannot be made or written.
void create_output_dir(const Comm& comm, const std::string& path, const char* flag);

}  // namespace h3d
