// NIfTI-1 and NIfTI-2 volumes (.nii, .nii.gz) through Debian's libnifti2
// (niftilib). Axes: the file stores x fastest, then y, then z, so the data
// read as a C array is (D, H, W) = (z, y, x), as everywhere in hybrid3d.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "hybrid3d/core/box.hpp"

namespace h3d {

bool is_nifti_path(const std::string& path);  // ends in .nii or .nii.gz

struct NiftiInfo {
  std::array<int64_t, 3> extent{};  // D, H, W (nz, ny, nx)
  bool integer = false;             // the stored type is an integer type
};
// Reads the header; throws runtime_error saying what is wrong (unreadable,
// not NIfTI, more than one volume, a non-numeric type).
NiftiInfo read_nifti_info(const std::string& path);

// The values of `box` (D, H, W coordinates inside the volume) as float,
// with the file's scaling (scl_slope, scl_inter) applied. Throws Error.
void read_nifti_box(const std::string& path, const Box& box, float* out);

// Writes a uint8 label volume of `extent` (D, H, W). With `geometry_from`
// (a NIfTI file of the same extent) the header's spacing, orientation and
// origin are copied, so viewers overlay it on that image. Written as a
// temporary name and renamed. Throws Error.
void write_nifti_labels(const std::string& path, const std::array<int64_t, 3>& extent, const uint8_t* labels,
                        const std::string& geometry_from);

}  // namespace h3d
