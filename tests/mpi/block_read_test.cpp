// Hybrid-parallel I/O: every rank's block read by hyperslab, under every
// layout of this world size (uneven blocks included), equals the same box of
// the whole sample read by one rank, for a file written by `generate`
// (channels last, int16), in every read mode; and for files `preprocess`
// made of it (sub-volumes; LBANN layout, several samples per file, chunked
// and gzip-compressed), each sub-volume equals its box of the original.
// Where the files hold int16 counts, the counts a data store keeps
// (load_counts) give load()'s values bitwise once transformed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "hybrid3d/data/hdf5_source.hpp"
#include "hybrid3d/data/preprocess.hpp"
#include "hybrid3d/data/universe_writer.hpp"
#include "hybrid3d/parallel/distribution.hpp"
#include "hybrid3d/parallel/process_grid.hpp"
#include "job_dir.hpp"
#include "layouts.hpp"

using namespace h3d;

namespace {

// Mismatches between `mine` ([C, box] channels first) and the same box of
// `all` ([C, whole]), where `whole` starts at `origin` in all's coordinates.
int64_t mismatches(const std::vector<float>& mine, const Box& box, const std::vector<float>& all, int64_t side,
                   const std::array<int64_t, 3>& origin) {
  const auto e = box.extents();
  int64_t bad = 0;
  for (int ch = 0; ch < 4; ++ch)
    for (int64_t z = 0; z < e[0]; ++z)
      for (int64_t y = 0; y < e[1]; ++y)
        for (int64_t x = 0; x < e[2]; ++x) {
          const int64_t gz = origin[0] + z + box.r[0].lo, gy = origin[1] + y + box.r[1].lo,
                        gx = origin[2] + x + box.r[2].lo;
          bad += mine[size_t(((ch * e[0] + z) * e[1] + y) * e[2] + x)] !=
                 all[size_t(((ch * side + gz) * side + gy) * side + gx)];
        }
  return bad;
}

// For a source of int16 files read independently or collectively: its
// counts of `box`, transformed, equal `loaded` (load()'s values) bitwise, and
// their targets too. Float files and the naive reader (which scatters
// floats) have no counts. Returns whether the counts were checked.
bool counts_match(SampleSource& src, bool int16, ReadMode mode, int64_t index, const Box& box,
                  const std::vector<float>& loaded, const float* target) {
  EXPECT_EQ(src.has_counts(), int16 && mode != ReadMode::kNaive);
  if (!src.has_counts()) return false;
  const int64_t n = 4 * box.volume();
  std::vector<int16_t> counts(size_t(n), -1);
  std::vector<float> transformed(size_t(n), -1.0f);
  float t[4];
  src.load_counts(index, box, counts.data(), t);
  transform_counts(src.counts_transform(), counts.data(), transformed.data(), n);
  EXPECT_EQ(std::memcmp(transformed.data(), loaded.data(), size_t(n) * sizeof(float)), 0) << read_mode_name(mode);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t[i], target[i]);
  return true;
}

TEST(BlockRead, EveryLayoutEqualsTheWholeSample) {
  Comm world = Comm::borrow(MPI_COMM_WORLD);
  const int64_t side = 16;
  const std::string dir = test::job_dir(world, "h3d_block");
  ASSERT_FALSE(dir.empty());
  const std::string path = dir + "/" + universe_file_name(7);
  write_universe(world, path, side, 21, 7);

  Hdf5Universes serial(Comm::borrow(MPI_COMM_SELF), dir, InputTransform::kNone);
  ASSERT_EQ(serial.size(), 1);
  const Box whole{{Range{0, side}, Range{0, side}, Range{0, side}}};
  std::vector<float> all(size_t(4 * whole.volume())), mine;
  float t_all[4], t[4];
  serial.load(0, whole, all.data(), t_all);
  int counts_checked = 0;
  for (ReadMode mode : {ReadMode::kIndependent, ReadMode::kCollective, ReadMode::kNaive}) {
    for (auto layout : test::layouts_for(world.size())) {
      ProcessGrid grid(world, layout);
      Hdf5Universes src(grid.group(), dir, InputTransform::kNone, mode);
      const Box box = Distribution::balanced({side, side, side}, grid.spatial(), 1).box(grid.spatial_rank());
      mine.assign(size_t(4 * box.volume()), -1.0f);
      src.load(0, box, mine.data(), t);
      EXPECT_EQ(mismatches(mine, box, all, side, {0, 0, 0}), 0)
          << read_mode_name(mode) << " layout " << test::name(layout) << " rank " << world.rank();
      for (int i = 0; i < 4; ++i) EXPECT_EQ(t[i], t_all[i]);
      counts_checked += counts_match(src, true, mode, 0, box, mine, t);
    }
  }
  // Independent and collective reads, on every layout.
  EXPECT_EQ(counts_checked, 2 * int(test::layouts_for(world.size()).size()));

  // Preprocessed into 8 sub-volumes of 8^3 in several file layouts.
  struct Variant {
    const char* name;
    PreprocessOptions o;
  };
  std::vector<Variant> variants(4);
  variants[0].name = "original-contiguous";
  variants[1].name = "lbann-batched";
  variants[1].o.layout = "lbann";
  variants[1].o.samples_per_file = 3;
  variants[1].o.dtype = "float32";  // LBANN's default, said here for the counts check
  variants[2].name = "original-chunked-gzip";
  variants[2].o.chunk = 4;
  variants[2].o.compress = 3;
  variants[3].name = "lbann-batched-chunked";
  variants[3].o.layout = "lbann";
  variants[3].o.samples_per_file = 8;
  variants[3].o.chunk = 3;
  variants[3].o.dtype = "int16";
  for (auto& v : variants) {
    v.o.in = path;
    v.o.out = dir + "/" + v.name;
    v.o.sample_size = side / 2;
    v.o.quiet = true;
    preprocess_universes(world, v.o);
    for (ReadMode mode : {ReadMode::kIndependent, ReadMode::kCollective, ReadMode::kNaive}) {
      for (auto layout : test::layouts_for(world.size())) {
        ProcessGrid grid(world, layout);
        Hdf5Universes src(grid.group(), v.o.out, InputTransform::kNone, mode);
        ASSERT_EQ(src.size(), 8) << v.name;
        const int64_t h = side / 2;
        const Box box = Distribution::balanced({h, h, h}, grid.spatial(), 1).box(grid.spatial_rank());
        for (int64_t k = 0; k < 8; ++k) {
          mine.assign(size_t(4 * box.volume()), -1.0f);
          src.load(k, box, mine.data(), t);
          // Sub-volumes in D, H, W order.
          const std::array<int64_t, 3> origin{(k / 4) * h, (k / 2 % 2) * h, (k % 2) * h};
          EXPECT_EQ(mismatches(mine, box, all, side, origin), 0)
              << v.name << " sample " << k << " " << read_mode_name(mode) << " layout " << test::name(layout)
              << " rank " << world.rank();
          for (int i = 0; i < 4; ++i) EXPECT_EQ(t[i], t_all[i]);
          counts_checked += counts_match(src, v.o.dtype != "float32", mode, k, box, mine, t);
        }
      }
    }
  }
  EXPECT_EQ(counts_checked, 2 * int(test::layouts_for(world.size()).size()) * (1 + 8 * 3));  // the int16 files
  world.barrier();
  if (world.rank() == 0) std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
