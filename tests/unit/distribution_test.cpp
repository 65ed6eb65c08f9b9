// Window arithmetic and block bounds (docs/parallelism.md's table).
#include <gtest/gtest.h>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/parallel/distribution.hpp"
#include "hybrid3d/layers/window_layer.hpp"

using namespace h3d;

TEST(Distribution, HaloTable) {
  auto d = Distribution::balanced({16, 16, 16}, {2, 1, 1}, 2);
  struct Row { Window1D w; int64_t before, after; };
  for (Row r : {Row{make_window(3, 1, Padding::kHalf), 1, 1}, Row{make_window(2, 1, Padding::kSame), 0, 1},
                Row{Window1D{2, 2, 0, 0}, 0, 0}, Row{Window1D{3, 2, 1, 1}, 1, 0},
                Row{make_window(3, 2, Padding::kHalf), 1, 0}}) {
    Window3D w{r.w, r.w, r.w};
    auto out = d.through(w, "t");
    auto h = d.halo_widths(w, out);
    EXPECT_EQ(h[0][0], r.before) << r.w.k << " " << r.w.s;
    EXPECT_EQ(h[0][1], r.after) << r.w.k << " " << r.w.s;
    if (r.w.s == 2) EXPECT_EQ(out.bounds(0), (std::vector<int64_t>{0, 4, 8}));
  }
}

TEST(Distribution, AlignedAndUnevenSplits) {
  EXPECT_EQ(Distribution::balanced({32, 8, 8}, {3, 1, 1}, 8).bounds(0), (std::vector<int64_t>{0, 8, 16, 32}));
  EXPECT_EQ(Distribution::balanced({6, 8, 8}, {4, 1, 1}, 1).bounds(0), (std::vector<int64_t>{0, 1, 3, 4, 6}));
}

TEST(Distribution, RefusesEmptyBlocksNamingTheLayer) {
  auto d = Distribution::balanced({4, 4, 4}, {1, 4, 1});
  Window1D p{2, 2, 0, 0};
  try {
    d.through({p, p, p}, "pool5");
    FAIL() << "expected a UsageError";
  } catch (const UsageError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("pool5"), std::string::npos) << m;
    EXPECT_NE(m.find("dimension H"), std::string::npos) << m;
  }
}
