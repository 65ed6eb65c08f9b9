// Any byte string as a .nii file: reading its header (read_nifti_info)
// either describes one 3-D volume of a supported type or throws
// runtime_error; reading a described volume (read_nifti_box) fills it or
// throws h3d::Error. niftilib reads files, so each input is written to a
// file of this process's own in /dev/shm (or /tmp) first.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/data/nifti_io.hpp"
#include "scratch_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = scratch_path("nifti", ".nii");
  if (FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  } else {
    return 0;
  }
  h3d::NiftiInfo info;
  try {
    info = h3d::read_nifti_info(path);
  } catch (const std::runtime_error&) {
    return 0;  // the expected answer to a bad header
  }
  const int64_t voxels = info.extent[0] * info.extent[1] * info.extent[2];
  if (voxels < 1) std::abort();  // a header accepted with an empty or negative extent
  if (voxels > (int64_t(1) << 16)) return 0;  // a claimed size is fine; reading it is the file's problem
  h3d::Box box;
  for (int d = 0; d < 3; ++d) box.r[d] = {0, info.extent[size_t(d)]};
  std::vector<float> out(static_cast<size_t>(voxels));
  try {
    h3d::read_nifti_box(path, box, out.data());
  } catch (const h3d::Error&) {
    // truncated data: a clear error
  }
  return 0;
}
