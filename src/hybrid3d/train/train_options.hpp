// The options of `hybrid3d train` (train/trainer.hpp runs them).
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "hybrid3d/models/model_options.hpp"
#include "hybrid3d/train/lr_schedule.hpp"
#include "hybrid3d/train/optimizer_options.hpp"
#include "hybrid3d/train/seg_loss_options.hpp"

namespace h3d {

// The gradient allreduce on a communication thread during backward: auto
// (on unless the node's ranks x threads exceed its cores), on, off.
enum class Overlap { kAuto, kOn, kOff };

struct TrainOptions {
  ModelOptions model;
  std::array<int, 3> spatial{1, 1, 1};
  bool spatial_auto = false;  // --spatial auto: the fastest layout that fits (plan/planner.hpp)
  // The memory check before the first step (train/memory_check.hpp):
  // --memory-per-rank (bytes; 0: what the node has), --force to run anyway.
  int64_t memory_per_rank = 0;
  bool force = false;
  std::string machine;  // --machine: rates for --spatial auto (plan/time_model.hpp)
  int64_t batch_size = 1;  // global
  int64_t steps = 0, epochs = 0;
  OptimizerOptions optimizer;
  LrSchedule schedule;
  std::string data = "synthetic", val_data, test_data;
  int64_t train_samples = 64, val_samples = 16;  // synthetic only
  // Shares of --data held out for validation and test (see data/sampler.hpp).
  double val_fraction = 0, test_fraction = 0;
  std::string last_batch = "drop";
  // Copy the file datasets here first (per node) and read the copies.
  std::string stage_dir;  // a partial last training mini-batch: drop | pad
  std::string transform = "log1p";
  std::string init, save, metrics;
  std::string profile;  // --profile: JSON path (empty: off)
  std::string backend = "cpu";
  int64_t log_every = 10, val_every = 0;  // 0: at the end of each epoch
  bool quiet = false;
  // Gradient allreduce in buckets of this many MiB, reduced during backward
  // on a communication thread (see GradientReducer for kAuto) or after it.
  double bucket_mib = 8;
  // Blocks read from files are kept in memory up to this many MiB per rank
  // (0: off; negative: a quarter of the node's available memory).
  double data_store_mib = -1;
  // Load the next mini-batch on a background thread (file sources only).
  bool prefetch = true;
  // How each rank gets its block of a file sample (see Hdf5Universes).
  std::string read_mode = "independent";
  Overlap allreduce_overlap = Overlap::kAuto;
  // ZeRO stages 1 and 2 (train/sharded_state.hpp): each rank keeps only its
  // shard of the optimizer state and of the reduced gradients.
  bool shard_optimizer = false;
  // Exchange each layer's halo while its block's interior computes (off:
  // blocking; the same bits either way).
  bool halo_overlap = true;
  // Bitwise the same weights, buffers and losses under every layout (at
  // the same threads per rank): layers/deterministic.hpp.
  bool deterministic = false;
  SegLossOptions seg_loss;  // segmentation models
  std::string intensity_window;  // segmentation files: "LO,HI" clips and scales to [0, 1]
  bool random_crop = false, flip = false;  // segmentation training augmentation (data/augment.hpp)
  // Checkpoints (train/checkpoint.hpp): every N steps and/or M minutes, the
  // newest `keep` kept; --resume a checkpoint, or "auto" (the newest valid
  // one in checkpoint_dir, else a fresh start); stop after N steps of this job.
  std::string checkpoint_dir, resume;
  int64_t checkpoint_every = 0, stop_after = 0;
  double checkpoint_minutes = 0;
  int keep = 2;
  // A step whose loss or gradients are not finite: stop (default) or skip its update.
  bool skip_nonfinite = false;
};

}  // namespace h3d
