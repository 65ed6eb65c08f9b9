// hybrid3d command line. Parses flags, builds the Trainer, runs it, and
// decides how the job ends on error:
//  - a UsageError (a flag, a layout, a file every rank reads the same) is
//    printed once and every rank exits 2, after agreeing over MPI that some
//    rank failed (so a failure on one rank never leaves the others waiting);
//  - any other error during training is printed by the failing rank, which
//    then aborts the whole job (MPI_Abort), so nothing hangs;
//  - SIGTERM / SIGINT stops training after the current step with a
//    checkpoint: exit 4 (a second signal ends the process at once).
#include <mpi.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/dist/comm.hpp"
#include "hybrid3d/dist/process_grid.hpp"
#include "hybrid3d/data/preprocess.hpp"
#include "hybrid3d/data/universe_writer.hpp"
#include "hybrid3d/train/predictor.hpp"
#include "hybrid3d/train/stop_signal.hpp"
#include "hybrid3d/train/trainer.hpp"

namespace {

template <typename T>
std::vector<T> parse_list(const std::string& s, const char* flag) {
  std::vector<T> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    std::istringstream is(item);
    T v;
    if (!(is >> v)) H3D_THROW(h3d::UsageError, flag << " '" << s << "' is not a comma-separated list of numbers");
    out.push_back(v);
  }
  return out;
}

void print_error(const std::exception& e, int rank, int size) {
  if (size > 1 && !dynamic_cast<const h3d::UsageError*>(&e))
    std::fprintf(stderr, "hybrid3d: error (rank %d): %s\n", rank, e.what());
  else
    std::fprintf(stderr, "hybrid3d: error: %s\n", e.what());
  std::fflush(stderr);
}

// Every rank says whether it failed; the lowest failing rank prints. Returns
// true if any rank failed. Collective: all ranks must reach it.
bool any_rank_failed(const h3d::Comm& world, const std::exception* local) {
  int mine = local ? world.rank() : world.size(), lowest = mine;
  MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, world.raw());
  if (local && lowest == world.rank()) print_error(*local, world.rank(), world.size());
  return lowest < world.size();
}

// `hybrid3d generate` and `preprocess`: bad options and inputs are found
// alike on every rank (exit 2, rank 0 prints); a failure while writing
// aborts the job.
template <typename Tool>
int run_tool(const h3d::Comm& world, Tool tool) {
  try {
    tool();
  } catch (const h3d::UsageError& e) {
    if (world.rank() == 0) print_error(e, 0, 1);
    return 2;
  } catch (const std::exception& e) {
    print_error(e, world.rank(), world.size());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 0;
}

// Threads per rank: --threads, else OMP_NUM_THREADS, else the node's cores
// shared among its ranks (mpirun would otherwise give every rank all of them).
void set_threads(const h3d::Comm& world, int threads) {
  if (threads < 0) H3D_THROW(h3d::UsageError, "--threads must be positive");
  if (threads > 0)
    omp_set_num_threads(threads);
  else if (!std::getenv("OMP_NUM_THREADS"))
    omp_set_num_threads(std::max(1, h3d::cores_on_this_node() / h3d::ranks_on_this_node(world)));
}

}  // namespace

int main(int argc, char** argv) {
  h3d::mpi_init(&argc, &argv);
  int code = 0;
  {
    h3d::Comm world = h3d::Comm::borrow(MPI_COMM_WORLD);
    h3d::TrainOptions o;
    CLI::App app{"hybrid3d: hybrid data x spatial parallel training of 3D CNNs"};
    app.require_subcommand(1);
    auto* train = app.add_subcommand("train", "train a model (run under mpirun for parallel layouts)");
    train->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: the last wins
    std::string spatial = "1x1x1", decay_boundaries, decay_factors;
    int threads = 0;
    train->add_option("--model", o.model.model, "cosmoflow | cosmoflow-lbann | unet3d")->capture_default_str();
    train->add_option("--in-channels", o.model.in_channels, "input channels (default: 4 for cosmoflow, 1 for unet3d)");
    train->add_option("--classes", o.model.classes, "unet3d: segmentation classes")->capture_default_str();
    train->add_option("--base-channels", o.model.base_channels, "unet3d: width of the first level (scales all)")
        ->capture_default_str();
    train->add_option("--levels", o.model.levels, "unet3d: encoder levels (input side a multiple of 2^levels)")
        ->capture_default_str();
    train->add_option("--loss", o.seg_loss.kind, "unet3d: ce | dice | ce+dice")->capture_default_str();
    std::string class_weights;
    train->add_option("--class-weights", class_weights, "unet3d: cross-entropy weight per class, e.g. 0.2,1,3");
    train->add_option("--ignore-label", o.seg_loss.ignore_label, "unet3d: a label value that counts nowhere (-1: none)")
        ->capture_default_str();
    train->add_option("--intensity-window", o.intensity_window,
                      "unet3d files: clip the volume to LO,HI (e.g. -100,400 HU) and scale it to [0, 1]");
    train->add_flag("--random-crop", o.random_crop,
                    "unet3d: train on --input-size crops at random places of larger volumes (default: the centre)");
    train->add_flag("--flip", o.flip, "unet3d: mirror each training sample along each axis with probability 1/2");
    train->add_option("--ce-weight", o.seg_loss.ce_weight, "unet3d: weight of cross-entropy in ce+dice")
        ->capture_default_str();
    train->add_option("--dice-weight", o.seg_loss.dice_weight, "unet3d: weight of the Dice loss in ce+dice")
        ->capture_default_str();
    train->add_option("--input-size", o.model.input_size, "side S of the cubic input volume")->capture_default_str();
    train->add_option("--batch-size", o.batch_size, "global mini-batch (over all data groups)")->capture_default_str();
    train->add_option("--spatial", spatial, "spatial split DxHxW of each sample; ranks / (D*H*W) data groups")
        ->capture_default_str();
    train->add_option("--steps", o.steps, "training steps (or use --epochs)");
    train->add_option("--epochs", o.epochs, "training epochs (default 1 when --steps is not given)");
    train->add_option("--optimizer", o.optimizer.kind, "sgd | adam")->capture_default_str();
    train->add_option("--lr", o.schedule.lr, "base learning rate")->capture_default_str();
    train->add_option("--momentum", o.optimizer.momentum, "SGD momentum")->capture_default_str();
    train->add_option("--weight-decay", o.optimizer.weight_decay, "L2 weight decay")->capture_default_str();
    train->add_option("--lr-schedule", o.schedule.kind, "constant | mlperf | poly")->capture_default_str();
    train->add_option("--warmup-steps", o.schedule.warmup, "linear warm-up steps (mlperf, poly)")->capture_default_str();
    train->add_option("--decay-boundaries", decay_boundaries, "mlperf: steps where the LR drops, e.g. 100,200");
    train->add_option("--decay-factors", decay_factors, "mlperf: LR factor from each boundary on, e.g. 0.25,0.125");
    train->add_option("--poly-power", o.schedule.power, "poly: exponent")->capture_default_str();
    train->add_option("--end-lr", o.schedule.end_lr, "poly: final learning rate")->capture_default_str();
    train->add_option("--kernel-size", o.model.kernel_size, "cosmoflow conv kernel (2 as MLPerf, or 3)")->capture_default_str();
    train->add_option("--dropout", o.model.dropout, "dropout probability in the head")->capture_default_str();
    train->add_flag("--batchnorm", o.model.batchnorm, "BatchNorm3d after each convolution");
    train->add_option("--seed", o.model.seed, "seed of weights, data, shuffling and dropout")->capture_default_str();
    train->add_option("--data", o.data, "synthetic, or a directory / glob of CosmoFlow HDF5 files")->capture_default_str();
    train->add_option("--val-data", o.val_data, "validation data: synthetic, or a directory / glob");
    train->add_option("--train-samples", o.train_samples, "synthetic training set size")->capture_default_str();
    train->add_option("--val-samples", o.val_samples, "synthetic validation set size (0: none)")->capture_default_str();
    train->add_option("--test-data", o.test_data, "test data, evaluated once at the end: synthetic, or a directory / glob");
    train->add_option("--val-fraction", o.val_fraction, "hold out this share of --data for validation (fixed by --seed)");
    train->add_option("--test-fraction", o.test_fraction, "hold out this share of --data as the test set");
    train->add_option("--last-batch", o.last_batch,
                      "a partial last training mini-batch: drop, or pad with the epoch's first samples")
        ->capture_default_str();
    train->add_option("--stage-dir", o.stage_dir,
                      "first copy the file datasets to DIR/train, DIR/val, DIR/test on every node (node-local "
                      "disk), then read the copies; copies already there are kept, other files there removed");
    train->add_option("--val-every", o.val_every, "validate every N steps (default: each epoch)");
    train->add_option("--transform", o.transform, "input transform: log1p | none")->capture_default_str();
    train->add_option("--init", o.init, "initial weights (safetensors, PyTorch state_dict names)");
    train->add_option("--save", o.save, "write the final weights here (safetensors)");
    train->add_option("--metrics", o.metrics, "write JSON lines metrics here (appended to after --resume)");
    train->add_option("--checkpoint-dir", o.checkpoint_dir, "write checkpoints here (see --checkpoint-every)");
    train->add_option("--checkpoint-every", o.checkpoint_every, "checkpoint every N steps (and at the end)");
    train->add_option("--checkpoint-minutes", o.checkpoint_minutes, "checkpoint every M minutes");
    train->add_option("--keep", o.keep, "checkpoints kept (the newest)")->capture_default_str();
    train->add_option("--resume", o.resume,
                      "continue from a checkpoint (a ckpt-N directory or a --checkpoint-dir), or auto: the newest "
                      "valid one in --checkpoint-dir, else a fresh start; any layout");
    train->add_flag("--skip-nonfinite", o.skip_nonfinite,
                    "skip the update of a step whose loss or gradients are not finite (counted in the metrics) "
                    "instead of stopping");
    train->add_option("--stop-after", o.stop_after,
                      "stop after N steps of this job with a checkpoint (a job-length budget; resume continues)");
    train->add_option("--profile", o.profile,
                      "time every layer, halo, allreduce, data and memory (after the first step); print the table "
                      "and write it as JSON here");
    train->add_option("--threads", threads,
                      "threads per rank (default: OMP_NUM_THREADS, else the node's cores / its ranks)");
    train->add_option("--allreduce-bucket-mib", o.bucket_mib,
                      "gradient allreduce bucket size in MiB (buckets start during backward)")
        ->capture_default_str();
    std::string overlap = "auto";
    train->add_option("--overlap", overlap,
                      "gradient allreduce during backward on a communication thread: on | off | auto (on unless "
                      "this node's ranks x threads exceed its cores)")
        ->capture_default_str();
    train->add_option("--data-store-mib", o.data_store_mib,
                      "keep the blocks read from files in memory, up to this many MiB per rank (0: off; default: "
                      "a quarter of the node's available memory, shared by its ranks)");
    bool no_prefetch = false;
    train->add_flag("--no-prefetch", no_prefetch,
                    "load each mini-batch in its step (default: the next one loads in the background, for files)");
    train->add_option("--read-mode", o.read_mode,
                      "how each rank reads its block of a file sample: independent (own hyperslab), collective "
                      "(MPI-IO collective hyperslabs) | naive (one rank per group reads the sample and scatters it)")
        ->capture_default_str();
    train->add_option("--backend", o.backend, "cpu (oneDNN) | ref (reference loops)")->capture_default_str();
    train->add_option("--log-every", o.log_every, "progress line every N steps")->capture_default_str();
    train->add_flag("--quiet", o.quiet, "no progress output");

    h3d::GenerateOptions gen_opts;
    auto* gen = app.add_subcommand("generate", "write synthetic universes as CosmoFlow HDF5 files (under mpirun: "
                                               "universes spread over groups of ranks, each written in parallel)");
    gen->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    gen->add_option("--kind", gen_opts.kind,
                    "cosmoflow (universes) | segmentation (CT-like cases with labels, LiTS layout)")
        ->capture_default_str();
    gen->add_option("--out", gen_opts.out, "output directory (created if missing)")->required();
    gen->add_option("--count", gen_opts.count, "number of universes")->capture_default_str();
    gen->add_option("--size", gen_opts.size, "side S of each S^3 x 4 universe")->required();
    gen->add_option("--seed", gen_opts.seed, "seed of the universe stream (same as train --seed)")->capture_default_str();
    gen->add_option("--first-index", gen_opts.first_index, "index of the first universe in the stream")
        ->capture_default_str();
    gen->add_option("--ranks-per-universe", gen_opts.ranks_per_universe,
                    "ranks that generate and write one universe together (default: all)");
    gen->add_flag("--quiet", gen_opts.quiet, "no progress output");

    h3d::PreprocessOptions pre;
    auto* prep = app.add_subcommand("preprocess", "cut universes into sub-volume samples, optionally in another "
                                                  "layout, type or chunking, with a manifest (ranks share the files)");
    prep->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    prep->add_option("--in", pre.in, "directory or glob of CosmoFlow HDF5 files")->required();
    prep->add_option("--out", pre.out, "output directory (created if missing)")->required();
    prep->add_option("--sample-size", pre.sample_size, "side of each cubic sub-volume (default: whole universes)");
    prep->add_option("--layout", pre.layout, "original (D, H, W, C) | lbann (C, D, H, W)")->capture_default_str();
    prep->add_option("--dtype", pre.dtype, "int16 | float32 (default: int16 for original, float32 for lbann)");
    prep->add_option("--samples-per-file", pre.samples_per_file, "samples per output file (more than 1: a leading "
                                                                 "sample dimension)")
        ->capture_default_str();
    prep->add_option("--chunk", pre.chunk, "HDF5 chunk side in D, H and W (0: contiguous)")->capture_default_str();
    prep->add_option("--gzip", pre.compress, "gzip level 1..9 for chunked output (0: none)")->capture_default_str();
    prep->add_flag("--quiet", pre.quiet, "no progress output");

    h3d::PredictOptions po;
    po.model.model = "unet3d";
    std::string pred_spatial = "1x1x1";
    int pred_threads = 0;
    auto* pred = app.add_subcommand("predict", "segment a whole volume with overlapping sliding windows (each "
                                               "window split over the ranks as in training)");
    pred->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    pred->add_option("--init", po.init, "trained weights (safetensors, from train --save)")->required();
    pred->add_option("--input", po.input, "the case: HDF5 with 'volume' (and optionally 'segmentation' for Dice)")
        ->required();
    pred->add_option("--out", po.out, "output HDF5: 'segmentation' uint8 (and 'probabilities')")->required();
    pred->add_option("--model", po.model.model, "unet3d")->capture_default_str();
    pred->add_option("--input-size", po.model.input_size, "window side (the training --input-size)")
        ->capture_default_str();
    pred->add_option("--classes", po.model.classes, "as in training")->capture_default_str();
    pred->add_option("--base-channels", po.model.base_channels, "as in training")->capture_default_str();
    pred->add_option("--levels", po.model.levels, "as in training")->capture_default_str();
    pred->add_option("--in-channels", po.model.in_channels, "as in training (default 1)");
    pred->add_option("--overlap", po.overlap, "fraction of a window shared with the next one")->capture_default_str();
    pred->add_flag("--probabilities", po.probabilities, "also write the class probabilities");
    pred->add_option("--intensity-window", po.intensity_window, "as in training: LO,HI clips and scales to [0, 1]");
    pred->add_option("--spatial", pred_spatial, "spatial split DxHxW of each window; ranks / (D*H*W) windows at a time")
        ->capture_default_str();
    pred->add_option("--threads", pred_threads, "threads per rank (default as for train)");
    pred->add_option("--backend", po.backend, "cpu | ref")->capture_default_str();
    pred->add_flag("--quiet", po.quiet, "no progress output");

    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      if (world.rank() == 0) app.exit(e);
      MPI_Finalize();
      return 0;
    } catch (const CLI::ParseError& e) {
      if (world.rank() == 0) {
        std::fprintf(stderr, "hybrid3d: error: %s (see hybrid3d %s --help)\n", e.what(), argc > 1 ? argv[1] : "");
      }
      MPI_Finalize();
      return 2;
    }

    if (gen->parsed() || prep->parsed() || pred->parsed()) {
      if (gen->parsed())
        code = run_tool(world, [&] {
          if (gen_opts.kind == "segmentation")
            h3d::generate_segmentation_cases(world, gen_opts);
          else if (gen_opts.kind == "cosmoflow")
            h3d::generate_universes(world, gen_opts);
          else
            H3D_THROW(h3d::UsageError, "--kind '" << gen_opts.kind << "' is unknown; use cosmoflow or segmentation");
        });
      else if (prep->parsed())
        code = run_tool(world, [&] { h3d::preprocess_universes(world, pre); });
      else
        code = run_tool(world, [&] {
          set_threads(world, pred_threads);
          po.spatial = h3d::ProcessGrid::parse_spatial(pred_spatial);
          h3d::predict_volume(world, po);
        });
      MPI_Finalize();
      return code;
    }

    std::unique_ptr<h3d::Trainer> trainer;
    std::unique_ptr<std::exception> failure;
    try {
      set_threads(world, threads);
      if (overlap == "auto")
        o.overlap = h3d::Overlap::kAuto;
      else if (overlap == "on")
        o.overlap = h3d::Overlap::kOn;
      else if (overlap == "off")
        o.overlap = h3d::Overlap::kOff;
      else
        H3D_THROW(h3d::UsageError, "--overlap must be on, off or auto, not '" << overlap << "'");
      o.prefetch = !no_prefetch;
      o.spatial = h3d::ProcessGrid::parse_spatial(spatial);
      o.schedule.boundaries = parse_list<int64_t>(decay_boundaries, "--decay-boundaries");
      o.schedule.factors = parse_list<double>(decay_factors, "--decay-factors");
      o.seg_loss.class_weights = parse_list<float>(class_weights, "--class-weights");
      if (o.steps < 0 || o.epochs < 0) H3D_THROW(h3d::UsageError, "--steps and --epochs must not be negative");
      if (o.batch_size < 1) H3D_THROW(h3d::UsageError, "--batch-size must be at least 1");
      if (o.log_every < 1) o.log_every = 1;
      trainer = std::make_unique<h3d::Trainer>(world, o);
    } catch (const h3d::UsageError& e) {
      failure = std::make_unique<h3d::UsageError>(e);
    } catch (const std::exception& e) {
      failure = std::make_unique<h3d::Error>(e.what());
    }
    if (any_rank_failed(world, failure.get())) {
      trainer.reset();
      MPI_Finalize();
      return 2;
    }

    try {
      h3d::install_stop_handlers();
      trainer->run();
      if (trainer->stopped_by_signal()) code = 4;
    } catch (const h3d::UsageError& e) {
      // Detected identically by every rank (a non-finite loss): one message, clean exit.
      if (world.rank() == 0) print_error(e, 0, 1);
      code = 3;
    } catch (const std::exception& e) {
      print_error(e, world.rank(), world.size());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  MPI_Finalize();
  return code;
}
