// The synthetic universes are generated block by block with a distributed
// FFT; every rank's block must equal the same box of the serial (1-rank)
// universe exactly, under every layout of this world size, uneven blocks
// included.
#include <gtest/gtest.h>

#include "hybrid3d/data/synthetic_universe.hpp"
#include "hybrid3d/parallel/distribution.hpp"
#include "hybrid3d/parallel/process_grid.hpp"
#include "layouts.hpp"

using namespace h3d;

namespace {

TEST(DataEquivalence, SyntheticBlocksEqualSerialUniverse) {
  Comm world = Comm::borrow(MPI_COMM_WORLD), self = Comm::borrow(MPI_COMM_SELF);
  for (int64_t side : {16, 24}) {
    const Box whole{{Range{0, side}, Range{0, side}, Range{0, side}}};
    float u_serial[4] = {}, u[4] = {};
    std::vector<int16_t> serial;
    if (world.rank() == 0) serial = generate_universe_block(self, side, 11, 3, whole, u_serial);
    serial.resize(size_t(4 * whole.volume()));
    world.bcast(serial.data(), int64_t(serial.size() * sizeof(int16_t)), 0);
    for (auto layout : test::layouts_for(world.size())) {
      ProcessGrid grid(world, layout);
      Distribution d = Distribution::balanced({side, side, side}, grid.spatial(), 1);
      Box box = d.box(grid.spatial_rank());
      std::vector<int16_t> mine = generate_universe_block(grid.group(), side, 11, 3, box, u);
      auto e = box.extents();
      int64_t mismatches = 0;
      for (int ch = 0; ch < 4; ++ch)
        for (int64_t z = 0; z < e[0]; ++z)
          for (int64_t y = 0; y < e[1]; ++y)
            for (int64_t x = 0; x < e[2]; ++x) {
              int64_t gz = z + box.r[0].lo, gy = y + box.r[1].lo, gx = x + box.r[2].lo;
              int16_t want = serial[size_t(((ch * side + gz) * side + gy) * side + gx)];
              mismatches += mine[size_t(((ch * e[0] + z) * e[1] + y) * e[2] + x)] != want;
            }
      EXPECT_EQ(mismatches, 0) << "side " << side << " layout " << test::name(layout) << " rank " << world.rank();
    }
  }
}

}  // namespace
