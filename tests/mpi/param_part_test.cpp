// A parameter held in parts (Param::part, fc1 on a spatial input): this
// rank's part of a whole, the whole from the parts on the group's root, and
// the parts from a whole on world rank 0 (sent in pieces), on every layout of
// this world size, against the whole matrix itself, bitwise.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "hybrid3d/layers/param_part.hpp"
#include "hybrid3d/parallel/process_grid.hpp"
#include "layouts.hpp"

using namespace h3d;

namespace {

// Column c of the whole goes to group rank (c * 7 + 3) % S: scattered and,
// for most S, of unequal widths per rank.
Param part_of(int64_t rows, int64_t cols, int rank, int ranks) {
  auto q = std::make_shared<ParamPart>();
  q->rows = rows;
  q->cols = cols;
  for (int64_t c = 0; c < cols; ++c)
    if ((c * 7 + 3) % ranks == rank) q->columns.push_back(c);
  Param p;
  p.name = "fc.weight";
  p.part = q;
  p.value.resize({rows, int64_t(q->columns.size())});
  return p;
}

float element(int64_t i) { return float(i % 1009) * 0.25f - 7.0f; }

}  // namespace

TEST(ParamPart, TakeGatherScatterEqualTheWholeOnEveryLayout) {
  Comm world = Comm::borrow(MPI_COMM_WORLD);
  int layouts = 0;
  // 300001 columns: a scatter piece (4 MiB) holds 3 rows, so 7 rows take 3 pieces, the last short.
  for (const auto& shape : std::vector<std::array<int64_t, 2>>{{5, 37}, {7, 300001}})
    for (const auto& layout : test::layouts_for(world.size())) {
      const ProcessGrid grid(world, layout);
      const std::string tag = test::name(layout) + " " + std::to_string(shape[0]) + "x" + std::to_string(shape[1]);
      const int64_t rows = shape[0], cols = shape[1];
      std::vector<float> whole(size_t(rows * cols));
      for (int64_t i = 0; i < rows * cols; ++i) whole[size_t(i)] = element(i);
      Param p = part_of(rows, cols, grid.spatial_rank(), grid.spatial_size());
      const std::vector<int64_t>& own = p.part->columns;
      const int64_t f = int64_t(own.size());
      ASSERT_GT(f, 0) << tag;
      ASSERT_EQ(p.whole_numel(), rows * cols) << tag;

      take_part(p, whole.data(), p.value.data());
      int64_t wrong = 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < f; ++j) wrong += p.value[r * f + j] != whole[size_t(r * cols + own[size_t(j)])];
      EXPECT_EQ(wrong, 0) << tag << ": take_part";

      const std::vector<float> back = gather_whole(grid.group(), p, p.value.data());
      if (grid.spatial_rank() == 0)
        EXPECT_TRUE(back == whole) << tag << ": gather_whole";
      else
        EXPECT_TRUE(back.empty()) << tag << ": gather_whole off the root";

      Tensor scattered({rows, f}, -1.0f);
      scatter_whole(world, p, world.rank() == 0 ? whole.data() : nullptr, scattered.data());
      wrong = 0;
      for (int64_t i = 0; i < rows * f; ++i) wrong += scattered[i] != p.value[i];
      EXPECT_EQ(wrong, 0) << tag << ": scatter_whole";
      ++layouts;
    }
  EXPECT_EQ(layouts, 2 * int(test::layouts_for(world.size()).size()));
}
