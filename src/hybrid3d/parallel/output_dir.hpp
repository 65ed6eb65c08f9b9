// Creating an output directory for a whole job: one rank creates it (with
// its parents, as mkdir -p), every rank learns the outcome, so a failure is
// one clear error on all ranks instead of one rank failing while the others
// wait.
#pragma once
#include <string>

#include "hybrid3d/parallel/comm.hpp"

namespace h3d {

// Collective over `comm` (rank 0 creates). Throws UsageError on every rank,
// naming `flag` and `path`, if the directory cannot be made or written.
void create_output_dir(const Comm& comm, const std::string& path, const char* flag);

// An output file's directory must exist and be writable, checked before
// the work that would fill it: UsageError naming `flag` and `path`
// otherwise. Nothing for an empty path (the output is off).
void require_writable_parent(const char* flag, const std::string& path);

}  // namespace h3d
