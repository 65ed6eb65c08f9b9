// Hybrid-parallel I/O: every rank's block read by hyperslab, under every
// layout of this world size (uneven blocks included), equals the same box of
// the whole sample read by one rank, for a file written by `generate`
// (channels last, int16). The file's layout detection and the other layouts
// are covered end to end by tests/cli/data_layouts_test.sh.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "hybrid3d/data/hdf5_source.hpp"
#include "hybrid3d/data/universe_writer.hpp"
#include "hybrid3d/dist/distribution.hpp"
#include "hybrid3d/dist/process_grid.hpp"
#include "layouts.hpp"

using namespace h3d;

namespace {

TEST(BlockRead, EveryLayoutEqualsTheWholeSample) {
  Comm world = Comm::borrow(MPI_COMM_WORLD), self = Comm::borrow(MPI_COMM_SELF);
  const int64_t side = 16;
  // One directory for the job: rank 0 makes it, everyone uses its name.
  char dir[256] = {};
  if (world.rank() == 0) {
    std::string tmpl = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/h3d_block_XXXXXX";
    std::snprintf(dir, sizeof dir, "%s", tmpl.c_str());
    ASSERT_NE(mkdtemp(dir), nullptr);
  }
  world.bcast(dir, sizeof dir, 0);
  const std::string path = std::string(dir) + "/" + universe_file_name(7);
  write_universe(world, path, side, 21, 7);

  Hdf5Universes src(world, dir, InputTransform::kNone);
  ASSERT_EQ(src.size(), 1);
  const Box whole{{Range{0, side}, Range{0, side}, Range{0, side}}};
  std::vector<float> all(size_t(4 * whole.volume())), mine;
  float t_all[4], t[4];
  src.load(0, whole, all.data(), t_all);
  for (auto layout : test::layouts_for(world.size())) {
    ProcessGrid grid(world, layout);
    const Box box = Distribution::balanced({side, side, side}, grid.spatial(), 1).box(grid.spatial_rank());
    mine.assign(size_t(4 * box.volume()), -1.0f);
    src.load(0, box, mine.data(), t);
    const auto e = box.extents();
    int64_t mismatches = 0;
    for (int ch = 0; ch < 4; ++ch)
      for (int64_t z = 0; z < e[0]; ++z)
        for (int64_t y = 0; y < e[1]; ++y)
          for (int64_t x = 0; x < e[2]; ++x) {
            const int64_t gz = z + box.r[0].lo, gy = y + box.r[1].lo, gx = x + box.r[2].lo;
            mismatches += mine[size_t(((ch * e[0] + z) * e[1] + y) * e[2] + x)] !=
                          all[size_t(((ch * side + gz) * side + gy) * side + gx)];
          }
    EXPECT_EQ(mismatches, 0) << "layout " << test::name(layout) << " rank " << world.rank();
    for (int i = 0; i < 4; ++i) EXPECT_EQ(t[i], t_all[i]);
  }
  world.barrier();
  if (world.rank() == 0) {
    std::remove(path.c_str());
    rmdir(dir);
  }
}

}  // namespace
