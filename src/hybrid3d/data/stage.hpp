// Staging (--stage-dir): before training, every node copies the dataset's
// files to a directory of its own (node-local disk or memory, as CosmoFlow
// runs on supercomputers copy to /tmp or a burst buffer), and training then
// reads the copies.
//
// The node's ranks share the files out. A copy is named NNNNNN_<name> (its
// place in the sorted source list, so the samples keep their ids and order
// whatever directories the glob spans), written as a temporary file and
// renamed when complete, with the source's modification time. A file whose
// copy already has the source's size and time is not copied again, so a
// second job with the same --stage-dir starts at once; files in the staging
// directory that are not part of the dataset are removed. Progress lines
// count the bytes of all nodes.
#pragma once
#include <string>

#include "hybrid3d/parallel/comm.hpp"

namespace h3d {

// Collective over `world`. Stages the files of `spec` (a directory or glob)
// into `dir`/`name` and returns that directory. Any failure (unwritable
// directory, unreadable file, disk full) is reported by name on every rank
// as a UsageError.
std::string stage_dataset(const Comm& world, const std::string& spec, const std::string& dir, const std::string& name,
                          bool quiet);

}  // namespace h3d
