#include "hybrid3d/data/hdf5_source.hpp"

#include <glob.h>
#include <hdf5.h>
#include <sys/stat.h>

#include <algorithm>
#include <sstream>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/data/hdf5_util.hpp"

namespace h3d {

namespace {

struct DatasetInfo {
  std::vector<hsize_t> dims;
};

DatasetInfo open_info(hid_t file, const char* name, const std::string& path) {
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0)
    H3D_THROW(Error, "file '" << path << "' has no dataset '" << name << "' (CosmoFlow layout: 'full' (D,H,W,C) and 'unitPar' (4,))");
  H5Handle ds{H5Dopen2(file, name, H5P_DEFAULT), H5Dclose};
  if (ds.id < 0) H3D_THROW(Error, "file '" << path << "': cannot open dataset '" << name << "': " << hdf5_message());
  H5Handle sp{H5Dget_space(ds.id), H5Sclose};
  int nd = H5Sget_simple_extent_ndims(sp.id);
  if (nd < 0) H3D_THROW(Error, "file '" << path << "': bad dataspace of '" << name << "'");
  DatasetInfo info;
  info.dims.resize(size_t(nd));
  H5Sget_simple_extent_dims(sp.id, info.dims.data(), nullptr);
  H5Handle ty{H5Dget_type(ds.id), H5Tclose};
  H5T_class_t cls = H5Tget_class(ty.id);
  if (cls != H5T_INTEGER && cls != H5T_FLOAT)
    H3D_THROW(Error, "file '" << path << "': dataset '" << name << "' is not numeric");
  return info;
}

std::string dims_str(const std::vector<hsize_t>& d) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < d.size(); ++i) os << (i ? ", " : "") << d[i];
  return os.str() + ")";
}

H5Handle open_file(const std::string& path) {
  H5Handle f{H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose};
  if (f.id < 0) H3D_THROW(Error, "cannot open HDF5 file '" << path << "': " << hdf5_message());
  return f;
}

}  // namespace

std::vector<std::string> Hdf5Universes::expand(const std::string& p) {
  std::vector<std::string> out;
  struct stat st {};
  std::string pattern = p;
  if (stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    for (const char* ext : {"/*.h5", "/*.hdf5"}) {
      glob_t g{};
      if (glob((p + ext).c_str(), 0, nullptr, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
      globfree(&g);
    }
  } else {
    glob_t g{};
    if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    globfree(&g);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Hdf5Universes::Hdf5Universes(const std::string& p, InputTransform t) : pattern_(p), transform_(t) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors come back to us, not to stderr
  files_ = expand(p);
  H3D_USAGE_CHECK(!files_.empty(), "--data '" << p << "': no HDF5 files found (give a directory of *.h5 files or a glob)");
  for (size_t i = 0; i < files_.size(); ++i) {
    H5Handle f = open_file(files_[i]);
    DatasetInfo full = open_info(f.id, "full", files_[i]);
    DatasetInfo par = open_info(f.id, "unitPar", files_[i]);
    if (full.dims.size() != 4)
      H3D_THROW(Error, "file '" << files_[i] << "': dataset 'full' has shape " << dims_str(full.dims)
                                << ", expected (D, H, W, C)");
    if (par.dims.size() != 1 || par.dims[0] != 4)
      H3D_THROW(Error, "file '" << files_[i] << "': dataset 'unitPar' has shape " << dims_str(par.dims)
                                << ", expected (4,)");
    std::array<int64_t, 3> e{int64_t(full.dims[0]), int64_t(full.dims[1]), int64_t(full.dims[2])};
    if (i == 0) {
      extent_ = e;
      channels_ = int64_t(full.dims[3]);
    } else if (e != extent_ || int64_t(full.dims[3]) != channels_) {
      H3D_THROW(Error, "file '" << files_[i] << "': dataset 'full' has shape " << dims_str(full.dims)
                                << " but '" << files_[0] << "' has (" << extent_[0] << ", " << extent_[1] << ", "
                                << extent_[2] << ", " << channels_ << "); all samples must have one shape");
    }
  }
}

void Hdf5Universes::load(int64_t index, const Box& box, float* out, float* target) {
  const std::string& path = files_.at(size_t(index));
  H5Handle f = open_file(path);
  {
    H5Handle ds{H5Dopen2(f.id, "unitPar", H5P_DEFAULT), H5Dclose};
    if (ds.id < 0 || H5Dread(ds.id, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, target) < 0)
      H3D_THROW(Error, "file '" << path << "': cannot read 'unitPar': " << hdf5_message());
  }
  H5Handle ds{H5Dopen2(f.id, "full", H5P_DEFAULT), H5Dclose};
  if (ds.id < 0) H3D_THROW(Error, "file '" << path << "': cannot open 'full': " << hdf5_message());
  H5Handle fs{H5Dget_space(ds.id), H5Sclose};
  auto e = box.extents();
  hsize_t start[4] = {hsize_t(box.r[0].lo), hsize_t(box.r[1].lo), hsize_t(box.r[2].lo), 0};
  hsize_t count[4] = {hsize_t(e[0]), hsize_t(e[1]), hsize_t(e[2]), hsize_t(channels_)};
  H5Sselect_hyperslab(fs.id, H5S_SELECT_SET, start, nullptr, count, nullptr);
  H5Handle ms{H5Screate_simple(4, count, nullptr), H5Sclose};
  int64_t vol = box.volume();
  scratch_.resize(size_t(vol * channels_));
  // HDF5 converts the stored type (int16 in CosmoFlow files) to float.
  if (H5Dread(ds.id, H5T_NATIVE_FLOAT, ms.id, fs.id, H5P_DEFAULT, scratch_.data()) < 0)
    H3D_THROW(Error, "file '" << path << "': cannot read block " << box << " of 'full': " << hdf5_message());
  for (int64_t c = 0; c < channels_; ++c)
    for (int64_t i = 0; i < vol; ++i) out[c * vol + i] = scratch_[size_t(i * channels_ + c)];
  apply_transform(transform_, out, vol * channels_);
}

std::string Hdf5Universes::describe() const {
  std::ostringstream os;
  os << files_.size() << " HDF5 universes of " << extent_[0] << "x" << extent_[1] << "x" << extent_[2] << " x "
     << channels_ << " from '" << pattern_ << "'";
  return os.str();
}

}  // namespace h3d
