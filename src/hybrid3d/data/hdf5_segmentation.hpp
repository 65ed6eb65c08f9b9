// Hdf5Segmentation: segmentation cases in HDF5, LBANN's LiTS layout: one
// case per file, dataset `volume` (D, H, W) or (C, D, H, W), any numeric
// type (float32 in LiTS), and dataset `segmentation` (D, H, W), integer
// labels (uint8 in LiTS). Each rank reads only its block of both by
// hyperslab; the labels arrive as float (exact) in the target buffer.
//
// The scan before training (collective, as for the CosmoFlow files) checks
// every file: both datasets present and numeric, labels integer, the two
// spatial shapes equal, data inside the file (truncated copies), and every
// case of the first good file's shape; bad files are named with their
// fault and no rank starts training.
//
// An intensity window (CT Hounsfield units, e.g. -100..400 for the liver)
// clips the volume to [lo, hi] and scales it to [0, 1] when given.
#pragma once
#include <string>
#include <vector>

#include "hybrid3d/data/sample_source.hpp"
#include "hybrid3d/parallel/comm.hpp"

namespace h3d {

struct IntensityWindow {
  bool on = false;
  float lo = 0, hi = 1;
  void apply(float* v, int64_t n) const;
};
// "LO,HI" (empty: off); throws UsageError naming `flag`.
IntensityWindow parse_intensity_window(const std::string& s, const char* flag);

class Hdf5Segmentation : public SampleSource {
 public:
  // require_labels false (prediction): a case without `segmentation` is
  // read for its volume only (its targets come back 0; has_labels() says).
  Hdf5Segmentation(const Comm& comm, const std::string& path_or_glob, int64_t classes, IntensityWindow window,
                   const char* flag = "--data", bool require_labels = true);
  bool has_labels() const override { return has_labels_; }
  int64_t size() const override { return int64_t(files_.size()); }
  std::array<int64_t, 3> extent() const override { return extent_; }
  int64_t channels() const override { return channels_; }
  int64_t classes() const override { return classes_; }
  void load(int64_t index, const Box& box, float* out, float* target) override;
  std::string describe() const override;

 private:
  std::string pattern_;
  std::vector<std::string> files_;
  std::array<int64_t, 3> extent_{};
  int64_t channels_ = 1, classes_ = 0, bytes_ = 0;
  bool channel_dim_ = false;  // `volume` is (C, D, H, W)
  bool has_labels_ = true;    // every case has `segmentation`
  IntensityWindow window_;
};

}  // namespace h3d
