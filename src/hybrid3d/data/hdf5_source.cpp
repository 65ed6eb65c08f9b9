#include "hybrid3d/data/hdf5_source.hpp"

#include <hdf5.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "hybrid3d/core/box_kernels.hpp"
#include "hybrid3d/core/error.hpp"
#include "hybrid3d/core/tensor.hpp"
#include "hybrid3d/data/file_scan.hpp"
#include "hybrid3d/data/hdf5_util.hpp"

namespace h3d {

Hdf5Universes::FileInfo Hdf5Universes::inspect(const std::string& path) {
  FileInfo fi;
  try {
    constexpr const char* kLayout = "CosmoFlow layout: 'full' and 'unitPar'";
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) H3D_SCAN_FAIL("cannot be read");
    H5Handle f{H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose};
    if (f.id < 0) H3D_SCAN_FAIL("is not a readable HDF5 file (" << hdf5_message() << ")");
    const NumericDataset full_ds = numeric_dataset(f.id, "full", kLayout);
    const std::vector<hsize_t>& full = full_ds.dims;
    const std::vector<hsize_t> par = numeric_dataset(f.id, "unitPar", kLayout).dims;
    if (full.size() != 4 && full.size() != 5)
      H3D_SCAN_FAIL("dataset 'full' has shape " << dims_str(full)
                                                << "; expected (D, H, W, C), (C, D, H, W) or a leading sample dimension");
    fi.batched = full.size() == 5;
    fi.integer = full_ds.integer;
    fi.int16 = full_ds.int16;
    const size_t o = fi.batched ? 1 : 0;
    fi.samples = fi.batched ? int64_t(full[0]) : 1;
    // Channels are the short end: last in the original files, first in LBANN's.
    const hsize_t first = full[o], last = full[o + 3];
    fi.channels_last = last < first || (last == first && fi.integer);
    const size_t e0 = fi.channels_last ? o : o + 1;
    fi.extent = {int64_t(full[e0]), int64_t(full[e0 + 1]), int64_t(full[e0 + 2])};
    fi.channels = int64_t(fi.channels_last ? last : first);
    const bool par_ok = fi.batched ? (par.size() == 2 && par[0] == full[0] && par[1] == 4)
                                   : (par.size() == 1 && par[0] == 4);
    if (!par_ok)
      H3D_SCAN_FAIL("dataset 'unitPar' has shape " << dims_str(par) << "; expected "
                                                   << (fi.batched ? "(N, 4) with N as in 'full'" : "(4,)"));
    fi.bytes = stored_bytes_within(f.id, "full", int64_t(st.st_size));
  } catch (const std::exception& e) {
    fi.error = e.what();
  }
  return fi;
}

std::vector<std::string> Hdf5Universes::expand(const std::string& p) {
  struct stat st {};
  if (stat(p.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return glob_sorted(p);
  std::vector<std::string> out = glob_sorted(p + "/*.h5"), more = glob_sorted(p + "/*.hdf5");
  out.insert(out.end(), more.begin(), more.end());
  std::sort(out.begin(), out.end());
  return out;
}

Hdf5Universes::Hdf5Universes(const Comm& comm, const std::string& p, InputTransform t, ReadMode mode,
                             const char* flag)
    : pattern_(p), transform_(t), mode_(mode) {
  if (mode_ != ReadMode::kIndependent) io_ = comm.dup();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors come back to us, not to stderr
  files_ = expand(p);
  H3D_USAGE_CHECK(!files_.empty(), flag << " '" << p << "': no HDF5 files found (give a directory of *.h5 files or a glob)");
  // A file's numbers: samples, extent, channels, stored bytes, flags.
  const std::vector<ScanResult> results = scan_in_parallel(comm, files_, [](const std::string& path) {
    const FileInfo fi = inspect(path);
    ScanResult r;
    r.error = fi.error;
    r.v = {fi.samples, fi.extent[0], fi.extent[1], fi.extent[2], fi.channels, fi.bytes,
           int64_t(fi.batched) | int64_t(fi.channels_last) << 1 | int64_t(fi.int16) << 2 | int64_t(fi.integer) << 3,
           0};
    return r;
  });
  std::vector<ScanResult> checked = results;
  int64_t ref = -1;  // the first good file sets the sample shape
  for (size_t i = 0; i < files_.size(); ++i) {
    const ScanResult& r = results[i];
    FileInfo fi;
    fi.error = r.error;
    fi.samples = r.v[0];
    fi.extent = {r.v[1], r.v[2], r.v[3]};
    fi.channels = r.v[4];
    fi.bytes = r.v[5];
    fi.batched = r.v[6] & 1;
    fi.channels_last = r.v[6] & 2;
    fi.int16 = r.v[6] & 4;
    fi.integer = r.v[6] & 8;
    if (fi.error.empty() && ref >= 0 && (fi.extent != extent_ || fi.channels != channels_)) {
      std::ostringstream os;
      os << "holds samples of " << fi.extent[0] << "x" << fi.extent[1] << "x" << fi.extent[2] << " x " << fi.channels
         << " but '" << files_[size_t(ref)] << "' holds " << extent_[0] << "x" << extent_[1] << "x" << extent_[2] << " x "
         << channels_ << "; all samples must have one shape";
      fi.error = checked[i].error = os.str();
    }
    if (fi.error.empty() && ref < 0) {
      ref = int64_t(i);
      extent_ = fi.extent;
      channels_ = fi.channels;
    }
    if (fi.error.empty())
      for (int64_t k = 0; k < fi.samples; ++k) samples_.push_back({int32_t(i), k});
    bytes_ += fi.error.empty() ? fi.bytes : 0;
    all_int16_ = all_int16_ && (!fi.error.empty() || fi.int16);
    info_.push_back(fi);
  }
  refuse_bad_files(flag, p, files_, checked);
  H3D_USAGE_CHECK(!samples_.empty(), flag << " '" << p << "': the files hold no samples");
}

template <class ReadFull>
void Hdf5Universes::read_sample(const Sample& smp, const Box& box, float* target, bool collective, ReadFull read_full) {
  const std::string& path = files_[size_t(smp.file)];
  const FileInfo& fi = info_[size_t(smp.file)];
  H5Handle fapl{H5Pcreate(H5P_FILE_ACCESS), H5Pclose};
  H5Handle plist{H5Pcreate(H5P_DATASET_XFER), H5Pclose};
  if (collective && (fapl.id < 0 || plist.id < 0 || H5Pset_fapl_mpio(fapl.id, io_.raw(), MPI_INFO_NULL) < 0 ||
                     H5Pset_dxpl_mpio(plist.id, H5FD_MPIO_COLLECTIVE) < 0))
    H3D_THROW(Error, "cannot set up MPI-IO for collective reads: " << hdf5_message());
  const hid_t dxpl = plist.id;
  H5Handle f{H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.id), H5Fclose};
  if (f.id < 0) H3D_THROW(Error, "cannot open HDF5 file '" << path << "': " << hdf5_message());
  {
    H5Handle ds{H5Dopen2(f.id, "unitPar", H5P_DEFAULT), H5Dclose};
    H5Handle fs{ds.id >= 0 ? H5Dget_space(ds.id) : -1, H5Sclose};
    const hsize_t start[2] = {hsize_t(smp.within), 0}, count[2] = {1, 4}, four = 4;
    if (fi.batched) H5Sselect_hyperslab(fs.id, H5S_SELECT_SET, start, nullptr, count, nullptr);
    H5Handle ms{H5Screate_simple(1, &four, nullptr), H5Sclose};
    if (ds.id < 0 || H5Dread(ds.id, H5T_NATIVE_FLOAT, ms.id, fs.id, dxpl, target) < 0)
      H3D_THROW(Error, "file '" << path << "': cannot read 'unitPar': " << hdf5_message());
  }
  H5Handle ds{H5Dopen2(f.id, "full", H5P_DEFAULT), H5Dclose};
  if (ds.id < 0) H3D_THROW(Error, "file '" << path << "': cannot open 'full': " << hdf5_message());
  H5Handle fs{H5Dget_space(ds.id), H5Sclose};
  const auto e = box.extents();
  const hsize_t c = hsize_t(channels_);
  std::vector<hsize_t> start, count;
  if (fi.batched) start.push_back(hsize_t(smp.within)), count.push_back(1);
  const hsize_t b0 = hsize_t(box.r[0].lo), b1 = hsize_t(box.r[1].lo), b2 = hsize_t(box.r[2].lo);
  if (fi.channels_last) {
    start.insert(start.end(), {b0, b1, b2, 0});
    count.insert(count.end(), {hsize_t(e[0]), hsize_t(e[1]), hsize_t(e[2]), c});
  } else {
    start.insert(start.end(), {0, b0, b1, b2});
    count.insert(count.end(), {c, hsize_t(e[0]), hsize_t(e[1]), hsize_t(e[2])});
  }
  H5Sselect_hyperslab(fs.id, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
  H5Handle ms{H5Screate_simple(int(count.size()), count.data(), nullptr), H5Sclose};
  auto read = [&](hid_t type, void* buf) {
    if (H5Dread(ds.id, type, ms.id, fs.id, dxpl, buf) < 0)
      H3D_THROW(Error, "file '" << path << "': cannot read block " << box << " of 'full': " << hdf5_message());
  };
  read_full(fi, read);
}

void Hdf5Universes::read_block(const Sample& smp, const Box& box, float* out, float* target, bool collective) {
  const int64_t vol = box.volume();
  read_sample(smp, box, target, collective, [&](const FileInfo& fi, auto read) {
    if (fi.int16) {
      // Counts as stored, then one table lookup does the conversion, the
      // transform and the move to channels first: HDF5's own int16 -> float
      // conversion is several times slower than the read.
      counts_.resize(size_t(vol * channels_));
      read(H5T_NATIVE_INT16, counts_.data());
      if (fi.channels_last)
        transform_counts_to_channels_first(transform_, counts_.data(), channels_, out, vol);
      else
        transform_counts(transform_, counts_.data(), out, vol * channels_);
      return;
    }
    // Other types: HDF5 converts to float.
    float* dst = out;
    if (fi.channels_last) {
      scratch_.resize(size_t(vol * channels_));
      dst = scratch_.data();
    }
    read(H5T_NATIVE_FLOAT, dst);
    if (fi.channels_last)
      for (int64_t ch = 0; ch < channels_; ++ch)
        for (int64_t i = 0; i < vol; ++i) out[ch * vol + i] = scratch_[size_t(i * channels_ + ch)];
    apply_transform(transform_, out, vol * channels_);
  });
}

void Hdf5Universes::load_counts(int64_t index, const Box& box, int16_t* out, float* target) {
  H3D_CHECK(has_counts(), describe() << ": load_counts needs int16 files read independently or collectively");
  const int64_t vol = box.volume();
  read_sample(samples_.at(size_t(index)), box, target, mode_ == ReadMode::kCollective,
              [&](const FileInfo& fi, auto read) {
                if (!fi.channels_last) return read(H5T_NATIVE_INT16, out);
                counts_.resize(size_t(vol * channels_));
                read(H5T_NATIVE_INT16, counts_.data());
                counts_to_channels_first(counts_.data(), channels_, out, vol);
              });
}

void Hdf5Universes::load_naive(const Sample& smp, const Box& box, float* out, float* target) {
  // The root learns every rank's box, reads the whole sample and packs each
  // rank's block for one MPI_Scatterv.
  const int p = io_.size(), me = io_.rank();
  int64_t mine[6];
  for (int d = 0; d < 3; ++d) mine[2 * d] = box.r[size_t(d)].lo, mine[2 * d + 1] = box.r[size_t(d)].hi;
  std::vector<int64_t> boxes(size_t(6 * p));
  io_.gather(mine, 6, boxes.data(), 0);
  std::vector<int> counts(static_cast<size_t>(p)), displs(static_cast<size_t>(p));
  if (me == 0) {
    const Box all{{Range{0, extent_[0]}, Range{0, extent_[1]}, Range{0, extent_[2]}}};
    Tensor whole;
    whole.reshape_uninit({1, channels_, extent_[0], extent_[1], extent_[2]});
    read_block(smp, all, whole.data(), target, false);
    int64_t total = 0;
    for (int r = 0; r < p; ++r) {
      Box b;
      for (int d = 0; d < 3; ++d) b.r[size_t(d)] = Range{boxes[size_t(6 * r + 2 * d)], boxes[size_t(6 * r + 2 * d + 1)]};
      const int64_t n = b.volume() * channels_;
      H3D_CHECK(total + n < (int64_t(1) << 31), "naive read: the blocks of one sample exceed 2^31 values (use --read-mode independent)");
      counts[size_t(r)] = int(n);
      displs[size_t(r)] = int(total);
      total += n;
    }
    send_.resize(size_t(total));
    for (int r = 0; r < p; ++r) {
      Box b;
      for (int d = 0; d < 3; ++d) b.r[size_t(d)] = Range{boxes[size_t(6 * r + 2 * d)], boxes[size_t(6 * r + 2 * d + 1)]};
      host_box_kernels().copy_box(whole.data(), all, send_.data() + displs[size_t(r)], b, b, channels_, CopyMode::kAssign);
    }
  }
  io_.scatterv(send_.data(), counts, displs, out, box.volume() * channels_, 0);
  io_.bcast(target, kTargets * int64_t(sizeof(float)), 0);
}

void Hdf5Universes::load(int64_t index, const Box& box, float* out, float* target) {
  const Sample smp = samples_.at(size_t(index));
  switch (mode_) {
    case ReadMode::kIndependent:
    case ReadMode::kCollective:
      read_block(smp, box, out, target, mode_ == ReadMode::kCollective);
      break;
    case ReadMode::kNaive:
      load_naive(smp, box, out, target);
      break;
  }
}

int64_t Hdf5Universes::group_max(int64_t v) const {
  if (mode_ == ReadMode::kIndependent || io_.size() == 1) return v;
  return int64_t(io_.allreduce_max(double(v)));
}

ReadMode parse_read_mode(const std::string& s) {
  if (s == "independent") return ReadMode::kIndependent;
  if (s == "collective") return ReadMode::kCollective;
  if (s == "naive") return ReadMode::kNaive;
  H3D_THROW(UsageError, "--read-mode '" << s << "' is unknown; use independent, collective or naive");
}

const char* read_mode_name(ReadMode m) {
  switch (m) {
    case ReadMode::kCollective: return "collective";
    case ReadMode::kNaive: return "naive";
    default: return "independent";
  }
}

std::string Hdf5Universes::describe() const {
  std::ostringstream os;
  os << samples_.size() << " samples of " << extent_[0] << "x" << extent_[1] << "x" << extent_[2] << " x "
     << channels_ << " in " << files_.size() << " HDF5 file(s), " << bytes_ / (1 << 20) << " MiB, from '" << pattern_
     << "', " << read_mode_name(mode_) << " reads";
  return os.str();
}

}  // namespace h3d
