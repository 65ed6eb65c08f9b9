#include "hybrid3d/data/nifti_io.hpp"

#include <nifti2_io.h>
#include <znzlib.h>
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

// Reads `n` bytes at `off` of the header as a little- or big-endian integer.
int64_t field(const unsigned char* h, size_t off, size_t n, bool swapped) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t(h[off + (swapped ? n - 1 - i : i)]) << (8 * i);
  if (n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t(0) << (8 * n);  // sign-extend
  return int64_t(v);
}

// Checks, from the header's own bytes, everything niftilib trusts before it
// builds an image: the version and byte order, dim[0] (niftilib indexes its
// 8-entry arrays up to it), every size, the data type and its bits, the data
// offset. niftilib alone turns sizes below 1 into 1, and crashed (fuzzing)
// on dim[0] = 21898 and on byte-swapped NIfTI-2 headers.
void check_raw_header(const std::string& path) {
  unsigned char h[540] = {};
  znzFile f = znzopen(path.c_str(), "rb", ends_with(path, ".gz"));
  if (znz_isnull(f)) throw std::runtime_error("cannot be opened: " + std::string(std::strerror(errno)));
  const size_t got = znzread(h, 1, sizeof h, f);
  znzclose(f);
  if (got < 348) throw std::runtime_error("is shorter than a NIfTI header (" + std::to_string(got) + " bytes)");
  int version = 0;
  bool swapped = false;
  for (bool sw : {false, true}) {
    const int64_t size = field(h, 0, 4, sw);
    if (size == 348 || (size == 540 && got == 540)) version = size == 348 ? 1 : 2, swapped = sw;
    if (version) break;
  }
  if (!version) throw std::runtime_error("is not a NIfTI file (its first 4 bytes are no NIfTI-1 or NIfTI-2 header size)");
  if (version == 2 && swapped)
    throw std::runtime_error("is a big-endian NIfTI-2 file, which niftilib cannot read safely; convert it to "
                             "little-endian (for example with nibabel) first");
  const size_t dim_at = version == 1 ? 40 : 16, dim_bytes = version == 1 ? 2 : 8;
  const int64_t ndim = field(h, dim_at, dim_bytes, swapped);
  if (ndim < 1 || ndim > 7)
    throw std::runtime_error("has dim[0] = " + std::to_string(ndim) + " in its header; a NIfTI header has 1 to 7 dimensions");
  for (int d = 1; d <= ndim; ++d) {
    const int64_t n = field(h, dim_at + size_t(d) * dim_bytes, dim_bytes, swapped);
    if (n < 1 || n > (int64_t(1) << 31))
      throw std::runtime_error("has dimension " + std::to_string(d) + " = " + std::to_string(n) +
                               " in its header; sizes must be 1 to 2^31");
  }
  const int64_t type = field(h, version == 1 ? 70 : 12, 2, swapped), bits = field(h, version == 1 ? 72 : 14, 2, swapped);
  const int expected = type == DT_UINT8 || type == DT_INT8 ? 8 : type == DT_INT16 || type == DT_UINT16 ? 16
                     : type == DT_INT32 || type == DT_UINT32 || type == DT_FLOAT32 ? 32
                     : type == DT_INT64 || type == DT_FLOAT64 ? 64 : 0;
  if (!expected) throw std::runtime_error("has data type code " + std::to_string(type) + "; expected an integer or float type");
  if (bits != expected)
    throw std::runtime_error("says " + std::to_string(bits) + " bits per voxel for data type code " + std::to_string(type) +
                             " (which has " + std::to_string(expected) + ")");
  double offset = 0;
  if (version == 1) {
    uint32_t raw = uint32_t(field(h, 108, 4, swapped));
    float v;
    std::memcpy(&v, &raw, 4);
    offset = v;
  } else {
    offset = double(field(h, 168, 8, swapped));
  }
  if (!(offset >= double(version == 1 ? 348 : 540) && offset <= double(int64_t(1) << 40)))
    throw std::runtime_error("has data offset " + std::to_string(offset) + " in its header, before the header's end or "
                             "past any file");
}

Nim open_header(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error("cannot be read: " + std::string(std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw std::runtime_error("is not a regular file");
  nifti_set_debug_level(0);  // errors come back to us
  check_raw_header(path);
  // Then the library's own checks before it builds an image.
  int version = 0;
  void* raw = nifti_read_header(path.c_str(), &version, 1);
  if (!raw) throw std::runtime_error("has an inconsistent NIfTI header");
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
