// Opening the datasets a model reads, for train and predict alike: which
// reader a flag's value gets, and whether the data fits the model.
//
//   "synthetic"          generated: universes (regression) or segmentation
//                        cases, `count` samples from stream index `offset`;
//   regression files     CosmoFlow HDF5 (a directory or glob; Hdf5Universes);
//   segmentation files   NIfTI (a .nii / .nii.gz file, or a directory of
//                        image / label pairs) or LiTS-layout HDF5.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "hybrid3d/data/sample_source.hpp"
#include "hybrid3d/parallel/comm.hpp"

namespace h3d {

// What the model asks of its data (the train layer fills it from the model
// and the reading flags).
struct DataRequest {
  bool segmentation = false;
  // Side S of the model's cubic input: synthetic samples are made at it,
  // NIfTI cases cut or padded to it around their centre (0: read at their
  // own size, as predict does).
  int64_t side = 0;
  int64_t classes = 0;  // segmentation
  uint64_t seed = 0;    // synthetic data
  std::string transform = "log1p", read_mode = "independent", intensity_window;
  bool require_labels = true;  // segmentation files; predict reads a case without them
};

// The source for `spec` (the value of `flag`, named in every error). Bad
// values and files: UsageError, the same on every rank of `group`.
std::unique_ptr<SampleSource> open_dataset(const Comm& group, const std::string& spec, const DataRequest& r,
                                           const char* flag, int64_t count = 0, int64_t offset = 0);

// UsageError unless every sample of `data` is a cube of side r.side with
// `channels` channels (the model's input).
void require_model_input(const SampleSource& data, const DataRequest& r, int64_t channels);

}  // namespace h3d
