#include "hybrid3d/data/hdf5_segmentation.hpp"

#include <hdf5.h>
#include <sys/stat.h>

#include <algorithm>
#include <sstream>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/data/file_scan.hpp"
#include "hybrid3d/data/hdf5_source.hpp"
#include "hybrid3d/data/hdf5_util.hpp"

namespace h3d {

void IntensityWindow::apply(float* v, int64_t n) const {
  if (!on) return;
  const float scale = 1.0f / (hi - lo);
  for (int64_t i = 0; i < n; ++i) v[i] = (std::min(std::max(v[i], lo), hi) - lo) * scale;
}

IntensityWindow parse_intensity_window(const std::string& s, const char* flag) {
  IntensityWindow w;
  if (s.empty()) return w;
  std::istringstream is(s);
  char comma = 0;
  H3D_USAGE_CHECK((is >> w.lo >> comma >> w.hi) && comma == ',' && is.peek() == EOF && w.hi > w.lo,
                  flag << " '" << s << "' is not LO,HI with LO < HI (for example -100,400)");
  w.on = true;
  return w;
}

namespace {

constexpr const char* kLayout = "LiTS layout: 'volume' and 'segmentation'";

// v: D, H, W, channels, has a channel dimension, stored bytes, has labels.
ScanResult inspect_case(const std::string& path, bool require_labels) {
  ScanResult r;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) H3D_SCAN_FAIL("cannot be read");
  H5Handle f{H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose};
  if (f.id < 0) H3D_SCAN_FAIL("is not a readable HDF5 file (" << hdf5_message() << ")");
  const NumericDataset vol = numeric_dataset(f.id, "volume", kLayout);
  const bool labelled = require_labels || H5Lexists(f.id, "segmentation", H5P_DEFAULT) > 0;
  NumericDataset seg;
  if (labelled) seg = numeric_dataset(f.id, "segmentation", kLayout);
  if (vol.dims.size() != 3 && vol.dims.size() != 4)
    H3D_SCAN_FAIL("dataset 'volume' has shape " << dims_str(vol.dims) << "; expected (D, H, W) or (C, D, H, W)");
  if (labelled && !seg.integer) H3D_SCAN_FAIL("dataset 'segmentation' is not integer (labels are class numbers)");
  const bool channel_dim = vol.dims.size() == 4;
  const std::vector<hsize_t> spatial(vol.dims.end() - 3, vol.dims.end());
  if (labelled && seg.dims != spatial)
    H3D_SCAN_FAIL("has 'volume' " << dims_str(vol.dims) << " but 'segmentation' " << dims_str(seg.dims)
                                  << "; the labels must cover the volume voxel for voxel");
  const int64_t bytes = stored_bytes_within(f.id, "volume", int64_t(st.st_size)) +
                        (labelled ? stored_bytes_within(f.id, "segmentation", int64_t(st.st_size)) : 0);
  r.v = {int64_t(spatial[0]), int64_t(spatial[1]), int64_t(spatial[2]), channel_dim ? int64_t(vol.dims[0]) : 1,
         int64_t(channel_dim), bytes, int64_t(labelled), 0};
  return r;
}

// Reads `box` of dataset `name` (spatial dims last, `lead` leading dims
// taken whole) as float into out.
void read_box(hid_t file, const char* name, const Box& box, const std::vector<hsize_t>& lead, float* out,
              const std::string& path) {
  H5Handle ds{H5Dopen2(file, name, H5P_DEFAULT), H5Dclose};
  if (ds.id < 0) H3D_THROW(Error, "file '" << path << "': cannot open '" << name << "': " << hdf5_message());
  H5Handle fs{H5Dget_space(ds.id), H5Sclose};
  std::vector<hsize_t> start(lead.size(), 0), count = lead;
  for (int d = 0; d < 3; ++d) {
    start.push_back(hsize_t(box.r[size_t(d)].lo));
    count.push_back(hsize_t(box.r[size_t(d)].size()));
  }
  H5Sselect_hyperslab(fs.id, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
  H5Handle ms{H5Screate_simple(int(count.size()), count.data(), nullptr), H5Sclose};
  if (H5Dread(ds.id, H5T_NATIVE_FLOAT, ms.id, fs.id, H5P_DEFAULT, out) < 0)
    H3D_THROW(Error, "file '" << path << "': cannot read block " << box << " of '" << name << "': " << hdf5_message());
}

}  // namespace

Hdf5Segmentation::Hdf5Segmentation(const Comm& comm, const std::string& p, int64_t classes, IntensityWindow window,
                                   const char* flag, bool require_labels)
    : pattern_(p), classes_(classes), window_(window) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  files_ = Hdf5Universes::expand(p);
  H3D_USAGE_CHECK(!files_.empty(), flag << " '" << p << "': no HDF5 files found (give a directory of *.h5 files or a glob)");
  std::vector<ScanResult> results =
      scan_in_parallel(comm, files_, [require_labels](const std::string& f) { return inspect_case(f, require_labels); });
  int64_t ref = -1;
  for (size_t i = 0; i < results.size(); ++i) {
    ScanResult& r = results[i];
    if (!r.error.empty()) continue;
    const std::array<int64_t, 3> e{r.v[0], r.v[1], r.v[2]};
    if (ref < 0) {
      ref = int64_t(i);
      extent_ = e;
      channels_ = r.v[3];
      channel_dim_ = r.v[4];
    } else if (e != extent_ || r.v[3] != channels_) {
      std::ostringstream os;
      os << "holds a case of " << e[0] << "x" << e[1] << "x" << e[2] << " x " << r.v[3] << " but '"
         << files_[size_t(ref)] << "' holds " << extent_[0] << "x" << extent_[1] << "x" << extent_[2] << " x "
         << channels_ << "; crop or pad the cases to one size";
      r.error = os.str();
      continue;
    }
    bytes_ += r.v[5];
    has_labels_ = has_labels_ && r.v[6];
  }
  refuse_bad_files(flag, p, files_, results);
}

void Hdf5Segmentation::load(int64_t index, const Box& box, float* out, float* target) {
  const std::string& path = files_.at(size_t(index));
  H5Handle f{H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose};
  if (f.id < 0) H3D_THROW(Error, "cannot open HDF5 file '" << path << "': " << hdf5_message());
  std::vector<hsize_t> lead;
  if (channel_dim_) lead.push_back(hsize_t(channels_));
  read_box(f.id, "volume", box, lead, out, path);
  if (has_labels_)
    read_box(f.id, "segmentation", box, {}, target, path);
  else
    std::fill_n(target, box.volume(), 0.0f);
  window_.apply(out, box.volume() * channels_);
}

std::string Hdf5Segmentation::describe() const {
  std::ostringstream os;
  os << files_.size() << " cases of " << extent_[0] << "x" << extent_[1] << "x" << extent_[2] << " x " << channels_
     << " in HDF5 files (LiTS layout), " << bytes_ / (1 << 20) << " MiB, from '" << pattern_ << "'";
  if (window_.on) os << ", intensity window " << window_.lo << ".." << window_.hi;
  return os.str();
}

}  // namespace h3d
