// Small HDF5 helpers shared by the reader and the writer.
#pragma once
#include <hdf5.h>

#include <string>

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

}  // namespace h3d
