// Hdf5Universes: CosmoFlow HDF5 files, one universe per file:
//   dataset "full"    int16 (any integer or float type is converted), shape (D, H, W, C), channels last
//   dataset "unitPar" float32, shape (4,)
// `--data` is a directory (every *.h5 / *.hdf5 in it, sorted) or a glob.
// Each rank reads only its own block with an HDF5 hyperslab, converts it to
// float, moves channels first and applies the input transform. Every file's
// shape is checked when the source is opened, so a bad file stops the job
// before the first step, named.
#pragma once
#include <string>
#include <vector>

#include "hybrid3d/data/sample_source.hpp"

namespace h3d {

class Hdf5Universes : public SampleSource {
 public:
  Hdf5Universes(const std::string& path_or_glob, InputTransform t);
  int64_t size() const override { return int64_t(files_.size()); }
  std::array<int64_t, 3> extent() const override { return extent_; }
  int64_t channels() const override { return channels_; }
  void load(int64_t index, const Box& box, float* out, float* target) override;
  std::string describe() const override;

  static std::vector<std::string> expand(const std::string& path_or_glob);

 private:
  std::string pattern_;
  std::vector<std::string> files_;
  std::array<int64_t, 3> extent_{};
  int64_t channels_ = 0;
  InputTransform transform_;
  std::vector<float> scratch_;
};

}  // namespace h3d
