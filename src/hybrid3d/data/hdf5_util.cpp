#include "hybrid3d/data/hdf5_util.hpp"

#include <sstream>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/data/file_scan.hpp"

namespace h3d {

std::string hdf5_message() {
  std::string msg;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
        auto* s = static_cast<std::string*>(out);
        if (e->desc && *e->desc) *s = e->desc;
        return 0;
      },
      &msg);
  H5Eclear2(H5E_DEFAULT);
  return msg.empty() ? "unknown HDF5 error" : msg;
}

hid_t h5_check(hid_t id_or_status, const char* what, const std::string& path) {
  if (id_or_status < 0) H3D_THROW(Error, "HDF5 " << what << " failed for '" << path << "': " << hdf5_message());
  return id_or_status;
}

std::string dims_str(const std::vector<hsize_t>& d) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < d.size(); ++i) os << (i ? ", " : "") << d[i];
  return os.str() + (d.size() == 1 ? ",)" : ")");
}

NumericDataset numeric_dataset(hid_t file, const char* name, const char* layout_hint) {
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0) H3D_SCAN_FAIL("has no dataset '" << name << "' (" << layout_hint << ")");
  H5Handle ds{H5Dopen2(file, name, H5P_DEFAULT), H5Dclose};
  if (ds.id < 0) H3D_SCAN_FAIL("cannot open dataset '" << name << "': " << hdf5_message());
  H5Handle sp{H5Dget_space(ds.id), H5Sclose};
  const int nd = H5Sget_simple_extent_ndims(sp.id);
  if (nd < 0) H3D_SCAN_FAIL("dataset '" << name << "' has a bad dataspace");
  NumericDataset out;
  out.dims.resize(static_cast<size_t>(nd));
  H5Sget_simple_extent_dims(sp.id, out.dims.data(), nullptr);
  H5Handle ty{H5Dget_type(ds.id), H5Tclose};
  const H5T_class_t cls = H5Tget_class(ty.id);
  if (cls != H5T_INTEGER && cls != H5T_FLOAT) H3D_SCAN_FAIL("dataset '" << name << "' is not numeric");
  out.integer = cls == H5T_INTEGER;
  out.int16 = out.integer && H5Tget_size(ty.id) == 2 && H5Tget_sign(ty.id) == H5T_SGN_2;
  return out;
}

int64_t stored_bytes_within(hid_t file, const char* name, int64_t file_size) {
  H5Handle ds{H5Dopen2(file, name, H5P_DEFAULT), H5Dclose};
  const int64_t bytes = int64_t(H5Dget_storage_size(ds.id));
  const haddr_t off = H5Dget_offset(ds.id);  // HADDR_UNDEF unless contiguous
  if (off != HADDR_UNDEF && int64_t(off) + bytes > file_size)
    H3D_SCAN_FAIL("is truncated: '" << name << "' needs " << int64_t(off) + bytes << " bytes, the file has "
                                    << file_size);
  return bytes;
}

}  // namespace h3d
