// The segmentation losses and metrics sum over the whole global batch
// volume: under every layout each rank's part must give the serial loss,
// the serial metrics and its block of the serial gradient.
#include <gtest/gtest.h>

#include "hybrid3d/backend/cpu/cpu_backend.hpp"
#include "hybrid3d/core/rng.hpp"
#include "hybrid3d/parallel/distribution.hpp"
#include "hybrid3d/parallel/process_grid.hpp"
#include "hybrid3d/train/seg_loss.hpp"
#include "layouts.hpp"
#include "test_util.hpp"

using namespace h3d;

namespace {

constexpr int64_t kBatch = 2, kClasses = 3;
const std::array<int64_t, 3> kExtent{8, 6, 10};

// Labels of the samples [s0, s0 + n) on `box`, a function of global
// coordinates: classes 0..2 and the ignore label 7 on about one voxel in ten.
std::vector<int32_t> labels_of(const Box& box, int64_t s0, int64_t n) {
  std::vector<int32_t> y;
  for (int64_t s = s0; s < s0 + n; ++s)
    for (int64_t z = box.r[0].lo; z < box.r[0].hi; ++z)
      for (int64_t h = box.r[1].lo; h < box.r[1].hi; ++h)
        for (int64_t w = box.r[2].lo; w < box.r[2].hi; ++w) {
          const uint64_t g = uint64_t(((s * kExtent[0] + z) * kExtent[1] + h) * kExtent[2] + w);
          const uint64_t r = hash_key(17, 1, g) % 10;
          y.push_back(r == 9 ? 7 : int32_t(r % 3));
        }
  return y;
}

TEST(SegLossEquivalence, EveryLayoutGivesTheSerialLossGradientAndMetrics) {
  Comm world = Comm::borrow(MPI_COMM_WORLD), self = Comm::borrow(MPI_COMM_SELF);
  CpuBackend cpu;
  const Box whole{{Range{0, kExtent[0]}, Range{0, kExtent[1]}, Range{0, kExtent[2]}}};
  for (const char* kind : {"ce", "dice", "ce+dice"}) {
    SegLossOptions o;
    o.kind = kind;
    o.ignore_label = 7;
    o.class_weights = {0.3f, 1.0f, 2.5f};
    Tensor z_all = test::global_random(5, kBatch, kClasses, whole, kExtent), dz_all;
    const std::vector<int32_t> y_all = labels_of(whole, 0, kBatch);
    const SegLossValue serial = segmentation_loss(cpu, self, o, z_all, y_all, dz_all);
    SegMetrics m_serial(kClasses);
    m_serial.add(z_all, y_all, 7);
    for (auto layout : test::layouts_for(world.size())) {
      ProcessGrid grid(world, layout);
      const Box box = Distribution::balanced(kExtent, layout).box(grid.spatial_rank());
      const int64_t lo = grid.group_index() * kBatch / grid.data_groups();
      const int64_t hi = (grid.group_index() + 1) * kBatch / grid.data_groups();
      Tensor z = test::global_random(5, hi - lo, kClasses, box, kExtent, lo), dz;
      const std::vector<int32_t> y = labels_of(box, lo, hi - lo);
      const SegLossValue v = segmentation_loss(cpu, world, o, z, y, dz);
      const std::string tag = std::string(kind) + " on " + test::name(layout);
      EXPECT_NEAR(v.loss, serial.loss, 1e-12 * std::abs(serial.loss)) << tag;
      EXPECT_LT(test::rel_diff(dz, test::block_of(dz_all, box, lo, hi - lo)), 1e-9) << tag;
      SegMetrics m(kClasses);
      m.add(z, y, 7);
      m.reduce(world);
      for (int64_t c = 0; c < kClasses; ++c) {
        EXPECT_DOUBLE_EQ(m.dice(c), m_serial.dice(c)) << tag;
        EXPECT_DOUBLE_EQ(m.iou(c), m_serial.iou(c)) << tag;
      }
      EXPECT_DOUBLE_EQ(m.accuracy(), m_serial.accuracy()) << tag;
    }
  }
}

}  // namespace
