// Hdf5Universes: CosmoFlow HDF5 files.
//
// Layouts, detected per file from the shape of `full` (and its type where
// the shape cannot tell):
//   original  `full` (D, H, W, C), channels last (int16 in the benchmark data)
//   LBANN     `full` (C, D, H, W), channels first (float32)
// either with a leading sample dimension (N, ...) for several samples per
// file; `unitPar` is (4,) or (N, 4). Any integer or float type is converted.
// `--data` is a directory (every *.h5 / *.hdf5 in it, sorted) or a glob.
//
// The scan before training is collective over `comm`: its ranks share the
// files out, open each, check datasets, shapes, types and that contiguous
// data lies inside the file (truncated copies), and exchange the results.
// Every bad file is reported by name with what is wrong, and no rank
// starts training; otherwise a summary says how many samples, of what
// shape and how many bytes. Each rank then reads only its own block of a
// sample with an HDF5 hyperslab, moves channels first, applies the
// transform.
#pragma once
#include <string>
#include <vector>

#include "hybrid3d/data/sample_source.hpp"
#include "hybrid3d/dist/comm.hpp"

namespace h3d {

class Hdf5Universes : public SampleSource {
 public:
  Hdf5Universes(const Comm& comm, const std::string& path_or_glob, InputTransform t);
  int64_t size() const override { return int64_t(samples_.size()); }
  std::array<int64_t, 3> extent() const override { return extent_; }
  int64_t channels() const override { return channels_; }
  void load(int64_t index, const Box& box, float* out, float* target) override;
  std::string describe() const override;

  static std::vector<std::string> expand(const std::string& path_or_glob);

  // What the scan found in one file.
  struct FileInfo {
    std::string error;  // empty: good
    int64_t samples = 0;
    bool batched = false, channels_last = true;
    std::array<int64_t, 3> extent{};
    int64_t channels = 0;
    int64_t bytes = 0;  // stored size of `full`
  };
  static FileInfo inspect(const std::string& path);

 private:
  struct Sample {
    int32_t file;
    int64_t within;  // position in the file's leading dimension
  };
  std::string pattern_;
  std::vector<std::string> files_;
  std::vector<FileInfo> info_;
  std::vector<Sample> samples_;
  std::array<int64_t, 3> extent_{};
  int64_t channels_ = 0, bytes_ = 0;
  InputTransform transform_;
  std::vector<float> scratch_;
};

}  // namespace h3d
