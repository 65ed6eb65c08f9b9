// Small HDF5 helpers shared by the reader and the writer.
#pragma once
#include <hdf5.h>

#include <string>
#include <vector>

namespace h3d {

// HDF5's own error stack, innermost message, for our error text (clears it).
std::string hdf5_message();

// Closes an HDF5 handle on scope exit.
struct H5Handle {
  hid_t id;
  herr_t (*close)(hid_t);
  H5Handle(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  H5Handle(H5Handle&& o) noexcept : id(o.id), close(o.close) { o.id = -1; }
  ~H5Handle() {
    if (id >= 0) close(id);
  }
};

// An HDF5 call's id or status, or Error "HDF5 <what> failed for '<path>':
// <HDF5's message>" when it is negative.
hid_t h5_check(hid_t id_or_status, const char* what, const std::string& path);

// "(a, b, c)" for messages.
std::string dims_str(const std::vector<hsize_t>& d);

// The shape of numeric dataset `name` (integer or float); throws
// runtime_error with what is wrong (missing, unopenable, not numeric).
// `layout_hint` ends the missing-dataset message ("CosmoFlow layout: ...").
struct NumericDataset {
  std::vector<hsize_t> dims;
  bool integer = false, int16 = false;
};
NumericDataset numeric_dataset(hid_t file, const char* name, const char* layout_hint);

// Throws runtime_error when contiguous dataset `name` ends past the end of
// the file (a truncated copy); returns its stored size in bytes.
int64_t stored_bytes_within(hid_t file, const char* name, int64_t file_size);

}  // namespace h3d
