// Hdf5Universes: CosmoFlow HDF5 files.
//
// Layouts, detected per file from the shape of `full` (and its type where
// the shape cannot tell):
//   original  `full` (D, H, W, C), channels last (int16 in the benchmark data)
//   LBANN     `full` (C, D, H, W), channels first (float32)
// either with a leading sample dimension (N, ...) for several samples per
// file; `unitPar` is (4,) or (N, 4). Any integer or float type is converted.
// `--data` is a directory (every *.h5 / *.hdf5 in it, sorted) or a glob.
//
// The scan before training is collective over `comm`: its ranks share the
// files out, open each, check datasets, shapes, types and that contiguous
// data lies inside the file (truncated copies), and exchange the results.
// Every bad file is reported by name with what is wrong, and no rank
// starts training; otherwise a summary says how many samples, of what
// shape and how many bytes. Each rank then reads only its own block of a
// sample with an HDF5 hyperslab, moves channels first, applies the
// transform.
//
// Read modes (--read-mode), all giving the same values:
//   independent  each rank opens the file itself and reads its hyperslab
//                (HDF5's POSIX driver): no communication at all;
//   collective   the group opens the file with MPI-IO and reads in one
//                collective transfer (ROMIO/OMPIO may aggregate the ranks'
//                pieces into large contiguous reads);
//   naive        the group's first rank reads the whole sample and sends
//                each rank its block (for comparison: the reader that
//                cannot scale, as it holds a whole sample and serialises
//                the reads).
// The last two are collective over the group: every rank of it must load
// the same samples in the same order (the Trainer does). They talk on a
// communicator of their own, so a background load may overlap the step.
#pragma once
#include <string>
#include <vector>

#include "hybrid3d/data/sample_source.hpp"
#include "hybrid3d/parallel/comm.hpp"

namespace h3d {

enum class ReadMode { kIndependent, kCollective, kNaive };
ReadMode parse_read_mode(const std::string& s);
const char* read_mode_name(ReadMode m);

class Hdf5Universes : public SampleSource {
 public:
  Hdf5Universes(const Comm& comm, const std::string& path_or_glob, InputTransform t,
                ReadMode mode = ReadMode::kIndependent, const char* flag = "--data");  // flag: for messages
  int64_t size() const override { return int64_t(samples_.size()); }
  std::array<int64_t, 3> extent() const override { return extent_; }
  int64_t channels() const override { return channels_; }
  void load(int64_t index, const Box& box, float* out, float* target) override;
  // int16 files (CosmoFlow's own) hand their counts to a cache as stored,
  // half the bytes of floats (the naive reader scatters floats: not there).
  bool has_counts() const override { return all_int16_ && mode_ != ReadMode::kNaive; }
  void load_counts(int64_t index, const Box& box, int16_t* out, float* target) override;
  InputTransform counts_transform() const override { return transform_; }
  std::string describe() const override;
  int64_t group_max(int64_t v) const override;
  const std::vector<std::string>& files() const { return files_; }
  int64_t bytes() const { return bytes_; }  // stored size of all `full` datasets
  // Which file holds sample `index`, and its place in the file's leading
  // dimension (0 for one sample per file).
  const std::string& file_of(int64_t index) const { return files_[size_t(samples_.at(size_t(index)).file)]; }
  int64_t within(int64_t index) const { return samples_.at(size_t(index)).within; }

  static std::vector<std::string> expand(const std::string& path_or_glob);

  // What the scan found in one file.
  struct FileInfo {
    std::string error;  // empty: good
    int64_t samples = 0;
    bool batched = false, channels_last = true, integer = false, int16 = false;  // `full`'s stored type
    std::array<int64_t, 3> extent{};
    int64_t channels = 0;
    int64_t bytes = 0;  // stored size of `full`
  };
  static FileInfo inspect(const std::string& path);

 private:
  struct Sample {
    int32_t file;
    int64_t within;  // position in the file's leading dimension
  };
  std::string pattern_;
  std::vector<std::string> files_;
  std::vector<FileInfo> info_;
  std::vector<Sample> samples_;
  std::array<int64_t, 3> extent_{};
  int64_t channels_ = 0, bytes_ = 0;
  bool all_int16_ = true;  // every good file stores `full` as int16
  InputTransform transform_;
  ReadMode mode_;
  Comm io_;  // the group's own communicator for collective and naive reads
  std::vector<float> scratch_, send_;
  std::vector<int16_t> counts_;  // int16 files are read as stored and converted here

  // Reads `box` of sample `smp` (channels first, transformed) and its
  // targets: by this rank alone, or collectively over io_ with MPI-IO.
  void read_block(const Sample& smp, const Box& box, float* out, float* target, bool collective);
  // Opens the file, reads the targets and selects `box` of `full`; then
  // read_full(file info, read) reads it, read(HDF5 memory type, buffer)
  // filling the buffer with the box as stored (channels last or first).
  template <class ReadFull>
  void read_sample(const Sample& smp, const Box& box, float* target, bool collective, ReadFull read_full);
  void load_naive(const Sample& smp, const Box& box, float* out, float* target);
};

}  // namespace h3d
