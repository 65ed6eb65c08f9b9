// The dataset scan before training, shared by the file sources: the ranks
// share out the files, inspect their own, and exchange the results, so that
// every rank knows every file's shape and every bad file is named before the
// first step.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "hybrid3d/parallel/comm.hpp"

namespace h3d {

// What an inspection finds wrong with a file: plain text (the caller adds
// the file's name), no source location.
#define H3D_SCAN_FAIL(msg)                    \
  do {                                        \
    std::ostringstream scan_os_;              \
    scan_os_ << msg;                          \
    throw std::runtime_error(scan_os_.str()); \
  } while (0)

// The paths matching a shell glob, sorted (none: empty).
std::vector<std::string> glob_sorted(const std::string& pattern);

// One file's result: what is wrong (empty: usable) and up to 8 numbers the
// source defines (shape, flags, bytes).
struct ScanResult {
  std::string error;
  std::array<int64_t, 8> v{};
};

// Collective over `comm`. `inspect` may throw (its message becomes the error).
std::vector<ScanResult> scan_in_parallel(const Comm& comm, const std::vector<std::string>& files,
                                         const std::function<ScanResult(const std::string&)>& inspect);

// Throws UsageError naming the first ten bad files with their faults, if any.
void refuse_bad_files(const char* flag, const std::string& spec, const std::vector<std::string>& files,
                      const std::vector<ScanResult>& results);

}  // namespace h3d
