// NiftiSegmentation: image and label pairs in NIfTI (.nii, .nii.gz), as the
// Medical Segmentation Decathlon ships them (DIR/imagesTr/NAME and
// DIR/labelsTr/NAME) or as LiTS does (DIR/volume-N.nii and
// DIR/segmentation-N.nii). `--data DIR` finds the pairs; a single image
// file (prediction) is read without labels unless its partner exists.
//
// Cases differ in size in these datasets, so every case is cut or padded
// to a cube of the training side S around its centre (padding: intensity
// window low end, or 0, and label 0). With S = 0 (prediction) the case is
// read at its own size. Each rank reads only its block of the cube
// (niftilib's sub-region reads; a .gz file is decompressed up to the end
// of the block).
//
// The scan checks every pair before training (in parallel over the
// ranks): both files readable as one 3-D NIfTI volume, integer labels, and
// the image and label grids equal; every bad pair is named.
#pragma once
#include <string>
#include <vector>

#include "hybrid3d/data/hdf5_segmentation.hpp"
#include "hybrid3d/data/sample_source.hpp"
#include "hybrid3d/parallel/comm.hpp"

namespace h3d {

class NiftiSegmentation : public SampleSource {
 public:
  NiftiSegmentation(const Comm& comm, const std::string& path, int64_t classes, IntensityWindow window, int64_t side,
                    const char* flag = "--data");
  int64_t size() const override { return int64_t(images_.size()); }
  std::array<int64_t, 3> extent() const override { return extent_; }
  int64_t channels() const override { return 1; }
  int64_t classes() const override { return classes_; }
  void load(int64_t index, const Box& box, float* out, float* target) override;
  std::string describe() const override;
  bool has_labels() const override { return has_labels_; }
  const std::string& image_path(int64_t index) const { return images_.at(size_t(index)); }

  // Whether `path` is NIfTI data: a .nii / .nii.gz file, or a directory
  // with imagesTr/ or volume-*.nii* files.
  static bool recognises(const std::string& path);

 private:
  std::string pattern_;
  std::vector<std::string> images_, labels_;  // labels_[i] empty: none
  std::vector<std::array<int64_t, 3>> sizes_;  // each case's own extent
  std::array<int64_t, 3> extent_{};
  int64_t classes_ = 0, side_ = 0;
  IntensityWindow window_;
  bool has_labels_ = true;
  std::vector<float> scratch_;
};

}  // namespace h3d
