#include "hybrid3d/data/nifti_io.hpp"

#include <nifti2_io.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "hybrid3d/core/error.hpp"

namespace h3d {

namespace {

struct NimFree {
  void operator()(nifti_image* n) const { nifti_image_free(n); }
};
using Nim = std::unique_ptr<nifti_image, NimFree>;

bool ends_with(const std::string& s, const char* tail) {
  const size_t n = std::strlen(tail);
  return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
}

Nim open_header(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error("cannot be read: " + std::string(std::strerror(errno)));
  nifti_set_debug_level(0);  // errors come back to us, not to stderr
  // The raw header first: the library quietly turns sizes below 1 into 1.
  int version = 0;
  void* raw = nifti_read_header(path.c_str(), &version, 0);
  if (!raw) throw std::runtime_error("is not a readable NIfTI file (bad header or truncated)");
  int64_t dims[8] = {};
  for (int d = 0; d < 8; ++d)
    dims[d] = version == 2 ? static_cast<nifti_2_header*>(raw)->dim[d] : static_cast<nifti_1_header*>(raw)->dim[d];
  std::free(raw);
  // niftilib indexes its 8-entry dim arrays up to dim[0]: check it first.
  if (dims[0] < 1 || dims[0] > 7)
    throw std::runtime_error("has dim[0] = " + std::to_string(dims[0]) +
                             " in its header; a NIfTI header has 1 to 7 dimensions");
  for (int d = 1; d <= dims[0]; ++d)
    if (dims[d] < 1)
      throw std::runtime_error("has dimension " + std::to_string(d) + " = " + std::to_string(dims[d]) +
                               " in its header; sizes must be positive");
  // Then the library's own checks (data type, sizes, offsets) before it builds an image.
  raw = nifti_read_header(path.c_str(), &version, 1);
  if (!raw) throw std::runtime_error("has an inconsistent NIfTI header (data type, bits per voxel or offsets)");
  std::free(raw);
  Nim nim(nifti_image_read(path.c_str(), 0));
  if (!nim) throw std::runtime_error("is not a readable NIfTI file (bad header or truncated)");
  return nim;
}

template <typename T>
void convert(const void* src, int64_t n, float* out) {
  const T* s = static_cast<const T*>(src);
  for (int64_t i = 0; i < n; ++i) out[i] = float(s[i]);
}

}  // namespace

bool is_nifti_path(const std::string& path) { return ends_with(path, ".nii") || ends_with(path, ".nii.gz"); }

NiftiInfo read_nifti_info(const std::string& path) {
  const Nim nim = open_header(path);
  for (int d = 4; d <= nim->dim[0]; ++d)
    if (nim->dim[d] > 1)
      throw std::runtime_error("holds " + std::to_string(nim->dim[0]) + "-D data (dim " + std::to_string(d) + " = " +
                               std::to_string(nim->dim[d]) + "); expected one 3-D volume");
  const int64_t ndim = nim->dim[0];
  if (ndim < 1 || ndim > 7) throw std::runtime_error("has " + std::to_string(ndim) + " dimensions; a NIfTI header allows 1 to 7");
  int64_t voxels = 1;
  for (int d = 1; d <= 3; ++d) {
    const int64_t n = d <= ndim ? nim->dim[d] : 1;
    if (n < 1) throw std::runtime_error("has dimension " + std::to_string(d) + " = " + std::to_string(n) + "; sizes must be positive");
    if (n > (int64_t(1) << 20) || (voxels *= n) > (int64_t(1) << 36))
      throw std::runtime_error("claims " + std::to_string(nim->dim[1]) + "x" + std::to_string(nim->dim[2]) + "x" +
                               std::to_string(nim->dim[3]) + " voxels, more than any volume hybrid3d can hold");
  }
  NiftiInfo info;
  info.extent = {std::max<int64_t>(1, nim->nz), std::max<int64_t>(1, nim->ny), std::max<int64_t>(1, nim->nx)};
  switch (nim->datatype) {
    case DT_UINT8: case DT_INT8: case DT_INT16: case DT_UINT16: case DT_INT32: case DT_UINT32: case DT_INT64:
      info.integer = true;
      break;
    case DT_FLOAT32: case DT_FLOAT64:
      break;
    default:
      throw std::runtime_error(std::string("has data type ") + nifti_datatype_to_string(nim->datatype) +
                               "; expected an integer or float type");
  }
  // A scaling slope makes integer data real.
  if (nim->scl_slope != 0 && !(nim->scl_slope == 1 && nim->scl_inter == 0)) info.integer = false;
  return info;
}

void read_nifti_box(const std::string& path, const Box& box, float* out) {
  Nim nim;
  try {
    nim = open_header(path);
  } catch (const std::exception& e) {
    H3D_THROW(Error, "NIfTI file '" << path << "' " << e.what());
  }
  const auto e = box.extents();
  const int64_t start[7] = {box.r[2].lo, box.r[1].lo, box.r[0].lo, 0, 0, 0, 0};
  const int64_t size[7] = {e[2], e[1], e[0], 1, 1, 1, 1};
  void* data = nullptr;
  const int64_t got = nifti_read_subregion_image(nim.get(), start, size, &data);
  std::unique_ptr<void, void (*)(void*)> keep(data, std::free);
  const int64_t n = box.volume();
  if (got != n * nim->nbyper) H3D_THROW(Error, "NIfTI file '" << path << "': cannot read block " << box << " (truncated?)");
  switch (nim->datatype) {
    case DT_UINT8: convert<uint8_t>(data, n, out); break;
    case DT_INT8: convert<int8_t>(data, n, out); break;
    case DT_INT16: convert<int16_t>(data, n, out); break;
    case DT_UINT16: convert<uint16_t>(data, n, out); break;
    case DT_INT32: convert<int32_t>(data, n, out); break;
    case DT_UINT32: convert<uint32_t>(data, n, out); break;
    case DT_INT64: convert<int64_t>(data, n, out); break;
    case DT_FLOAT32: convert<float>(data, n, out); break;
    case DT_FLOAT64: convert<double>(data, n, out); break;
    default: H3D_THROW(Error, "NIfTI file '" << path << "': unsupported data type " << nim->datatype);
  }
  if (nim->scl_slope != 0)
    for (int64_t i = 0; i < n; ++i) out[i] = float(nim->scl_slope * double(out[i]) + nim->scl_inter);
}

void write_nifti_labels(const std::string& path, const std::array<int64_t, 3>& extent, const uint8_t* labels,
                        const std::string& geometry_from) {
  Nim nim;
  if (!geometry_from.empty() && is_nifti_path(geometry_from)) {
    const Nim src = open_header(geometry_from);
    nim.reset(nifti_copy_nim_info(src.get()));
  } else {
    const int64_t dims[8] = {3, extent[2], extent[1], extent[0], 1, 1, 1, 1};
    nim.reset(nifti_make_new_nim(dims, DT_UINT8, 0));
  }
  H3D_CHECK(nim && nim->nx == extent[2] && nim->ny == extent[1] && nim->nz == extent[0],
            "the geometry of '" << geometry_from << "' does not match the prediction");
  nim->datatype = DT_UINT8;
  nim->nbyper = 1;
  nim->scl_slope = 0;
  nim->scl_inter = 0;
  nim->cal_min = 0;
  nim->cal_max = 0;
  nim->intent_code = NIFTI_INTENT_LABEL;
  const int64_t n = extent[0] * extent[1] * extent[2];
  std::vector<uint8_t> copy(labels, labels + n);
  nim->data = copy.data();
  // The library picks the format from the name: write NAME.tmp.nii[.gz].
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  const std::string stem = path.substr(0, path.size() - (gz ? 7 : 4));
  const std::string tmp = stem + ".tmp" + (gz ? ".nii.gz" : ".nii");
  std::remove(tmp.c_str());
  if (nifti_set_filenames(nim.get(), tmp.c_str(), 0, 1) != 0) {
    nim->data = nullptr;
    H3D_THROW(Error, "cannot name the NIfTI output '" << tmp << "'");
  }
  nifti_image_write(nim.get());
  nim->data = nullptr;  // ours, not the library's to free
  struct stat st {};
  if (::stat(tmp.c_str(), &st) != 0 || st.st_size == 0) H3D_THROW(Error, "cannot write the NIfTI file '" << tmp << "'");
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    H3D_THROW(Error, "cannot rename '" << tmp << "' to '" << path << "': " << std::strerror(errno));
}

}  // namespace h3d
