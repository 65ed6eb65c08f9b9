// The memory model against the run it models: for every layout of this
// world size, each rank's replayed peak of tensors (plan/memory_model.hpp:
// a dry replay on address space) equals the BufferPool peak the same rank
// reaches in three real training steps through the Trainer (the third is
// the first whose next batch is prefetched beside a handed-over one). The model is
// only as good as this agreement: everything else it adds (the process,
// the data store) is a measured constant or a budget.
#include "hybrid3d/plan/memory_model.hpp"

#include <gtest/gtest.h>

#include <cstdio>

#include "hybrid3d/data/universe_writer.hpp"
#include "hybrid3d/models/registry.hpp"
#include "hybrid3d/train/optimizer.hpp"
#include "hybrid3d/train/trainer.hpp"
#include "job_dir.hpp"
#include "layouts.hpp"

using namespace h3d;

namespace {

// This rank's BufferPool peak over three steps of a Trainer, less what the
// pool held before the Trainer was made.
int64_t real_peak(const Comm& world, const TrainOptions& o) {
  BufferPool& pool = BufferPool::instance();
  pool.trim();
  const int64_t before = pool.stats().live_bytes;
  pool.reset_peak();
  {
    Trainer t(world, o);
    // The Trainer's own memory check replays the network (its copy's
    // weights came and went): measure the steps from here, as a fresh
    // process holding this Trainer would.
    pool.reset_peak();
    for (int64_t step = 0; step < 3; ++step) t.train_step(step);
  }
  return pool.stats().peak_bytes - before;
}

MemoryRequest request_of(const TrainOptions& o, int ranks) {
  MemoryRequest r;
  r.model = o.model;
  r.extent = {o.model.input_size, o.model.input_size, o.model.input_size};
  r.batch_size = o.batch_size;
  r.spatial = o.spatial;
  r.ranks = ranks;
  r.optimizer_slots = make_optimizer(o.optimizer)->slots();
  r.shard_optimizer = o.shard_optimizer;
  r.bucket_bytes = int64_t(o.bucket_mib * (1 << 20));
  // As Trainer: synthetic universes load in the step, segmentation volumes ahead.
  r.prefetch = o.prefetch && (o.data != "synthetic" || is_segmentation(o.model));
  r.backend = o.backend;
  return r;
}

void expect_model_matches(const std::string& what, TrainOptions o) {
  const Comm world = Comm::borrow(MPI_COMM_WORLD);
  o.quiet = true;
  o.train_samples = 8;
  o.steps = 8;  // so that the third step prefetches the fourth
  o.val_samples = 0;
  o.data_store_mib = 0;
  int ran = 0;
  for (const auto& layout : test::layouts_for(world.size())) {
    const int S = layout[0] * layout[1] * layout[2];
    if (world.size() % S != 0 || world.size() / S > o.batch_size) continue;
    o.spatial = layout;
    const int64_t real = real_peak(world, o);
    // A rank whose replay throws must not leave the others waiting in the
    // next layout's collectives: every rank learns of it.
    MemoryEstimate e;
    std::string failure;
    try {
      e = estimate_rank_memory(request_of(o, world.size()), world.rank());
    } catch (const std::exception& ex) {
      failure = ex.what();
      std::fprintf(stderr, "rank %d: %s on %s: the replay failed: %s\n", world.rank(), what.c_str(),
                   test::name(layout).c_str(), ex.what());
    }
    ASSERT_EQ(world.allreduce_max(failure.empty() ? 0.0 : 1.0), 0.0)
        << what << " on " << test::name(layout) << ": a replay failed" << (failure.empty() ? "" : ": " + failure);
    const double err = double(e.tensors() - real) / double(real);
    const std::string tag = what + " on " + test::name(layout) + ", rank " + std::to_string(world.rank());
    if (world.rank() == 0)
      std::printf("[memory model] %-40s real %8.2f MiB  model %8.2f MiB  (%+.2f%%)\n", tag.c_str(),
                  double(real) / (1 << 20), double(e.tensors()) / (1 << 20), 100 * err);
    EXPECT_TRUE(std::abs(err) < 0.02) << tag << ": real peak " << real << " bytes, model " << e.tensors() << " ("
                                      << 100 * err << "%)";
    ++ran;
  }
  ASSERT_GT(ran, 0) << what << ": no layout of " << world.size() << " ranks ran";
}

}  // namespace

TEST(MemoryModel, CosmoflowMatchesTheRealPool) {
  TrainOptions o;
  o.model.model = "cosmoflow";
  o.model.input_size = 32;
  o.batch_size = 2;
  o.optimizer.kind = "adam";
  expect_model_matches("cosmoflow 32^3 adam", o);
}

// From files the next batch loads while a step runs (synthetic universes
// load in the step): the input is then held twice, and the replay must hand
// the prefetched buffer over as the Trainer does.
TEST(MemoryModel, CosmoflowFromFilesMatchesTheRealPool) {
  const Comm world = Comm::borrow(MPI_COMM_WORLD);
  const std::string dir = test::job_dir(world, "h3d_memory");
  ASSERT_FALSE(dir.empty());
  GenerateOptions g;
  g.out = dir;
  g.count = 8;
  g.size = 32;
  g.quiet = true;
  generate_universes(world, g);
  TrainOptions o;
  o.model.model = "cosmoflow";
  o.model.input_size = 32;
  o.batch_size = 2;
  o.optimizer.kind = "adam";
  o.data = dir;
  expect_model_matches("cosmoflow 32^3 adam from files", o);
}

TEST(MemoryModel, CosmoflowBatchnormMatchesTheRealPool) {
  TrainOptions o;
  o.model.model = "cosmoflow";
  o.model.input_size = 32;
  o.model.kernel_size = 3;
  o.model.batchnorm = true;
  o.model.dropout = 0.2f;
  o.batch_size = 4;
  expect_model_matches("cosmoflow 32^3 k3 bn dropout sgd", o);
}

// --shard-optimizer: the shard of the gradients and of the optimizer state,
// and full gradients held only from their layer's backward to their
// reduce-scatter (batch norm's own stay whole).
TEST(MemoryModel, CosmoflowShardedMatchesTheRealPool) {
  TrainOptions o;
  o.model.model = "cosmoflow";
  o.model.input_size = 32;
  o.model.batchnorm = true;
  o.batch_size = 2;
  o.optimizer.kind = "adam";
  o.shard_optimizer = true;
  expect_model_matches("cosmoflow 32^3 bn adam sharded", o);
}

TEST(MemoryModel, Unet3dMatchesTheRealPool) {
  TrainOptions o;
  o.model.model = "unet3d";
  o.model.input_size = 16;
  o.model.levels = 2;
  o.model.base_channels = 8;
  o.batch_size = 2;
  o.optimizer.kind = "adam";
  expect_model_matches("unet3d 16^3 levels 2 base 8 adam", o);
}
