#include "command_line.hpp"

#include <algorithm>
#include <sstream>
#include <vector>

#include "config_file.hpp"
#include "hybrid3d/backend/registry.hpp"
#include "hybrid3d/core/error.hpp"
#include "hybrid3d/core/bytes.hpp"
#include "hybrid3d/parallel/parse_spatial.hpp"

namespace h3d {

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
    std::string rest;
    if (!(is >> v) || (is >> rest))
      H3D_THROW(UsageError, flag << " '" << s << "' is not a comma-separated list of numbers");
    out.push_back(v);
  }
  return out;
}

// on | off (| auto where `with_auto`), for the flag `flag`.
Overlap parse_overlap(const std::string& v, const char* flag, bool with_auto) {
  if (v == "on") return Overlap::kOn;
  if (v == "off") return Overlap::kOff;
  if (v == "auto" && with_auto) return Overlap::kAuto;
  H3D_THROW(UsageError, flag << " must be on, off" << (with_auto ? " or auto" : "") << ", not '" << v << "'");
}

// The flags that choose and size the model: the same for train and predict
// (predict needs the values training used).
void add_model_flags(CLI::App* app, ModelOptions& m) {
  app->add_option("--model", m.model, CommandLine::kModelNames)->capture_default_str();
  app->add_option("--input-size", m.input_size,
                  "side S of the cubic input volume (predict: unet3d's window side, as in training)")
      ->capture_default_str();
  app->add_option("--in-channels", m.in_channels, "input channels (default: 4 for cosmoflow, 1 for unet3d)");
  app->add_option("--classes", m.classes, "unet3d: segmentation classes")->capture_default_str();
  app->add_option("--base-channels", m.base_channels, "unet3d: width of the first level (scales all)")
      ->capture_default_str();
  app->add_option("--levels", m.levels, "unet3d: encoder levels (input side a multiple of 2^levels)")
      ->capture_default_str();
  app->add_option("--kernel-size", m.kernel_size, "cosmoflow conv kernel (2 as MLPerf, or 3)")->capture_default_str();
  app->add_flag("--batchnorm", m.batchnorm, "BatchNorm3d after each convolution");
  app->add_option("--seed", m.seed, "seed of weights, data, shuffling and dropout (predict: as in training)")
      ->capture_default_str();
}

}  // namespace

// The flags of the parallel layout and the kernels: the same for train and predict.
void CommandLine::add_layout_flags(CLI::App* app, LayoutFlags& f, std::string& backend) {
  app->add_option("--spatial", f.spatial,
                  "spatial split DxHxW of each sample (predict: of each window); ranks / (D*H*W) data groups; "
                  "train: auto takes the fastest layout predicted to fit (hybrid3d plan)")
      ->capture_default_str();
  app->add_option("--threads", f.threads,
                  "threads per rank (default: OMP_NUM_THREADS, else the CPUs of the rank's affinity mask, at most "
                  "the node's cores / its ranks)");
  app->add_option("--halo-overlap", f.halo_overlap,
                  "on | off: exchange each layer's halo while its block's interior computes (off: blocking); "
                  "on and off give the same bits (docs/parallelism.md)")
      ->capture_default_str();
  app->add_option("--backend", backend, backend_help())->capture_default_str();
  // Split in two (issue 15); a hidden flag so that the old one gets a clear error, not "unknown option".
  app->add_option("--overlap", f.old_overlap)->group("");
}

CommandLine::CommandLine() {
  app_.require_subcommand(1);
  train_ = app_.add_subcommand("train", "train a model (run under mpirun for parallel layouts)");
  train_->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: the last wins
  add_model_flags(train_, train.model);
  add_layout_flags(train_, train_layout_, train.backend);
  train_->add_option("--loss", train.seg_loss.kind, "unet3d: ce | dice | ce+dice")->capture_default_str();
  train_->add_option("--class-weights", class_weights_, "unet3d: cross-entropy weight per class, e.g. 0.2,1,3");
  train_->add_option("--ignore-label", train.seg_loss.ignore_label, "unet3d: a label value that counts nowhere (-1: none)")
      ->capture_default_str();
  train_->add_option("--intensity-window", train.intensity_window,
                    "unet3d files: clip the volume to LO,HI (e.g. -100,400 HU) and scale it to [0, 1]");
  train_->add_flag("--random-crop", train.random_crop,
                  "unet3d: train on --input-size crops at random places of larger volumes (default: the centre)");
  train_->add_flag("--flip", train.flip, "unet3d: mirror each training sample along each axis with probability 1/2");
  train_->add_option("--ce-weight", train.seg_loss.ce_weight, "unet3d: weight of cross-entropy in ce+dice")
      ->capture_default_str();
  train_->add_option("--dice-weight", train.seg_loss.dice_weight, "unet3d: weight of the Dice loss in ce+dice")
      ->capture_default_str();
  train_->add_option("--batch-size", train.batch_size, "global mini-batch (over all data groups)")->capture_default_str();
  train_->add_option("--steps", train.steps, "training steps (or use --epochs)");
  train_->add_option("--epochs", train.epochs, "training epochs (default 1 when --steps is not given)");
  train_->add_option("--optimizer", train.optimizer.kind, "sgd | adam")->capture_default_str();
  train_->add_option("--memory-per-rank", memory_per_rank_,
                     "memory each rank may use, with a unit (1500MiB, 2GiB); default: the node's available "
                     "memory (or its cgroup limit) over its ranks. train refuses a layout predicted not to fit");
  train_->add_flag("--force", train.force, "train even if the predicted peak memory exceeds --memory-per-rank");
  train_->add_option("--machine", train.machine, "--spatial auto: a machine file of rates (hybrid3d plan)");
  train_->add_option("--lr", train.schedule.lr, "base learning rate")->capture_default_str();
  train_->add_option("--momentum", train.optimizer.momentum, "SGD momentum")->capture_default_str();
  train_->add_option("--weight-decay", train.optimizer.weight_decay, "L2 weight decay")->capture_default_str();
  train_->add_option("--lr-schedule", train.schedule.kind, "constant | mlperf | poly")->capture_default_str();
  train_->add_option("--warmup-steps", train.schedule.warmup, "linear warm-up steps (mlperf, poly)")->capture_default_str();
  train_->add_option("--decay-boundaries", decay_boundaries_, "mlperf: steps where the LR drops, e.g. 100,200");
  train_->add_option("--decay-factors", decay_factors_, "mlperf: LR factor from each boundary on, e.g. 0.25,0.125");
  train_->add_option("--poly-power", train.schedule.power, "poly: exponent")->capture_default_str();
  train_->add_option("--end-lr", train.schedule.end_lr, "poly: final learning rate")->capture_default_str();
  train_->add_option("--dropout", train.model.dropout, "dropout probability in the head")->capture_default_str();
  train_->add_option("--data", train.data,
                    "synthetic, or a directory / glob of files: CosmoFlow HDF5 (cosmoflow, cosmoflow-lbann), LiTS "
                    "HDF5 or NIfTI cases (unet3d; docs/data.md)")
      ->capture_default_str();
  train_->add_option("--val-data", train.val_data, "validation data: synthetic, or a directory / glob as --data");
  train_->add_option("--train-samples", train.train_samples, "synthetic training set size")->capture_default_str();
  train_->add_option("--val-samples", train.val_samples, "synthetic validation set size (0: none)")->capture_default_str();
  train_->add_option("--test-data", train.test_data, "test data, evaluated once at the end: synthetic, or a directory / glob as --data");
  train_->add_option("--val-fraction", train.val_fraction, "hold out this share of --data for validation (fixed by --seed)");
  train_->add_option("--test-fraction", train.test_fraction, "hold out this share of --data as the test set");
  train_->add_option("--last-batch", train.last_batch,
                    "a partial last training mini-batch: drop, or pad with the epoch's first samples")
      ->capture_default_str();
  train_->add_option("--stage-dir", train.stage_dir,
                    "first copy the file datasets to DIR/train, DIR/val, DIR/test on every node (node-local "
                    "disk), then read the copies; copies already there are kept, other files there removed");
  train_->add_option("--val-every", train.val_every, "validate every N steps (default: each epoch)");
  train_->add_option("--transform", train.transform, "input transform: log1p | none")->capture_default_str();
  train_->add_option("--init", train.init, "initial weights (safetensors, PyTorch state_dict names)");
  train_->add_option("--save", train.save, "write the final weights here (safetensors)");
  train_->add_option("--metrics", train.metrics, "write JSON lines metrics here (appended to after --resume)");
  train_->add_option("--checkpoint-dir", train.checkpoint_dir, "write checkpoints here (see --checkpoint-every)");
  train_->add_option("--checkpoint-every", train.checkpoint_every, "checkpoint every N steps (and at the end)");
  train_->add_option("--checkpoint-minutes", train.checkpoint_minutes, "checkpoint every M minutes");
  train_->add_option("--keep", train.keep, "checkpoints kept (the newest)")->capture_default_str();
  train_->add_option("--resume", train.resume,
                    "continue from a checkpoint (a ckpt-N directory or a --checkpoint-dir), or auto: the newest "
                    "valid one in --checkpoint-dir, else a fresh start; any layout");
  train_->add_flag("--skip-nonfinite", train.skip_nonfinite,
                  "skip the update of a step whose loss or gradients are not finite (counted in the metrics) "
                  "instead of stopping");
  train_->add_option("--stop-after", train.stop_after,
                    "stop after N steps of this job with a checkpoint (a job-length budget; resume continues)");
  train_->add_option("--profile", train.profile,
                    "time every layer, halo, allreduce, data and memory (after the first step); print the table "
                    "and write it as JSON here");
  train_->add_option("--allreduce-bucket-mib", train.bucket_mib,
                    "gradient allreduce bucket size in MiB (buckets start during backward)")
      ->capture_default_str();
  train_->add_option("--allreduce-overlap", allreduce_overlap_,
                    "on | off | auto: reduce gradient buckets during backward on a communication thread (auto: on "
                    "unless this node's ranks x threads exceed its cores; off: after backward, blocking)")
      ->capture_default_str();
  train_->add_flag("--shard-optimizer", train.shard_optimizer,
                  "ZeRO stages 1 and 2: gradients reduce-scattered, each rank holding and updating only its "
                  "1/ranks shard of the optimizer state and of the reduced gradients, then the weights "
                  "allgathered; the same numbers as without it, checkpoints unchanged");
  train_->add_flag("--deterministic", train.deterministic,
                  "bitwise the same weights, buffers and losses under every layout and rank count (at the same "
                  "--threads): sums over space and samples formed on fixed tiles and added exactly; blocks must "
                  "be whole tiles (the model's alignment)");
  train_->add_option("--data-store-mib", train.data_store_mib,
                    "keep the blocks read from files or generated (synthetic universes) in memory, up to this "
                    "many MiB per rank for the training, validation and test sets together (0: off; default: a "
                    "quarter of the node's available memory, shared by its ranks); blocks beyond it are read "
                    "or generated again");
  train_->add_flag("--no-prefetch", no_prefetch_,
                  "load each mini-batch in its step (default: the next one loads in the background, for files)");
  train_->add_option("--read-mode", train.read_mode,
                    "how each rank reads its block of a file sample: independent (own hyperslab), collective "
                    "(MPI-IO collective hyperslabs) | naive (one rank per group reads the sample and scatters it)")
      ->capture_default_str();
  train_->add_option("--log-every", train.log_every, "progress line every N steps")->capture_default_str();
  train_->add_flag("--quiet", train.quiet, "no progress output");

  gen_ = app_.add_subcommand("generate", "write synthetic universes as CosmoFlow HDF5 files (under mpirun: "
                                             "universes spread over groups of ranks, each written in parallel)");
  gen_->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  gen_->add_option("--kind", generate.kind,
                  "cosmoflow (universes) | segmentation (CT-like cases with labels, LiTS layout)")
      ->capture_default_str();
  gen_->add_option("--out", generate.out, "output directory (created if missing)")->required();
  gen_->add_option("--count", generate.count, "number of universes")->capture_default_str();
  gen_->add_option("--size", generate.size, "side S of each S^3 x 4 universe")->required();
  gen_->add_option("--seed", generate.seed, "seed of the universe stream (same as train --seed)")->capture_default_str();
  gen_->add_option("--first-index", generate.first_index, "index of the first universe in the stream")
      ->capture_default_str();
  gen_->add_option("--ranks-per-universe", generate.ranks_per_universe,
                  "ranks that generate and write one universe together (default: all)");
  gen_->add_flag("--quiet", generate.quiet, "no progress output");

  prep_ = app_.add_subcommand("preprocess", "cut universes into sub-volume samples, optionally in another "
                                                "layout, type or chunking, with a manifest (ranks share the files)");
  prep_->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  prep_->add_option("--in", preprocess.in, "directory or glob of CosmoFlow HDF5 files")->required();
  prep_->add_option("--out", preprocess.out, "output directory (created if missing)")->required();
  prep_->add_option("--sample-size", preprocess.sample_size, "side of each cubic sub-volume (default: whole universes)");
  prep_->add_option("--layout", preprocess.layout, "original (D, H, W, C) | lbann (C, D, H, W)")->capture_default_str();
  prep_->add_option("--dtype", preprocess.dtype, "int16 | float32 (default: int16 for original, float32 for lbann)");
  prep_->add_option("--samples-per-file", preprocess.samples_per_file, "samples per output file (more than 1: a leading "
                                                               "sample dimension)")
      ->capture_default_str();
  prep_->add_option("--chunk", preprocess.chunk, "HDF5 chunk side in D, H and W (0: contiguous)")->capture_default_str();
  prep_->add_option("--gzip", preprocess.compress, "gzip level 1..9 for chunked output (0: none)")->capture_default_str();
  prep_->add_flag("--quiet", preprocess.quiet, "no progress output");

  predict.model.model = "unet3d";
  pred_ = app_.add_subcommand("predict", "segment a whole volume with overlapping sliding windows (unet3d), or "
                                             "predict the parameters of every sample of a dataset as CSV "
                                             "(cosmoflow, cosmoflow-lbann); each sample split over the ranks as "
                                             "in training");
  pred_->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  pred_->add_option("--init", predict.init, "trained weights (safetensors, from train --save)")->required();
  pred_->add_option("--out", predict.out,
                    "unet3d: NAME.h5 ('segmentation' uint8, and 'probabilities') or NAME.nii[.gz]; regression: "
                    "NAME.csv per sample, and NAME.universes.csv per source universe for preprocess output")
      ->required();
  add_model_flags(pred_, predict.model);
  add_layout_flags(pred_, pred_layout_, predict.backend);
  // Segmentation.
  pred_->add_option("--input", predict.input,
                    "unet3d: the case, HDF5 with 'volume' (and 'segmentation' for Dice) or NIfTI");
  pred_->add_option("--window-overlap", predict.window_overlap,
                    "unet3d: share of a window's side its neighbour covers too, in [0, 1)")
      ->capture_default_str();
  pred_->add_flag("--probabilities", predict.probabilities, "unet3d: also write the class probabilities");
  pred_->add_option("--intensity-window", predict.intensity_window,
                    "unet3d: as in training, LO,HI clips and scales to [0, 1]");
  // Regression.
  pred_->add_option("--data", predict.data, "regression: a directory or glob of CosmoFlow HDF5 files, as train --data");
  pred_->add_option("--batch-size", predict.batch_size,
                    "regression: samples per mini-batch over all data groups (default: one per group)");
  pred_->add_option("--transform", predict.transform, "regression: as in training, log1p | none")
      ->capture_default_str();
  pred_->add_option("--read-mode", predict.read_mode, "regression: independent | collective | naive, as in training")
      ->capture_default_str();
  pred_->add_flag("--quiet", predict.quiet, "no progress output");

  plan.job.data = "files";
  plan_ = app_.add_subcommand("plan", "list every layout of a job's ranks with its predicted peak memory per rank "
                                      "and step time, fastest first, the fastest that fits marked (runs on one "
                                      "process; docs/scaling.md)");
  plan_->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_model_flags(plan_, plan.job.model);
  plan_->add_option("--dropout", plan.job.model.dropout, "dropout probability in the head")->capture_default_str();
  plan_->add_option("--batch-size", plan.job.batch_size, "global mini-batch")->capture_default_str();
  plan_->add_option("--ranks", plan.ranks, "ranks of the job (default: this job's)");
  plan_->add_option("--ranks-per-node", plan.ranks_per_node, "ranks sharing a node (default: all of them)");
  plan_->add_option("--memory-per-rank", plan_memory_,
                    "memory each rank may use, with a unit (1500MiB, 2GiB); default: this node's available memory "
                    "(or cgroup limit) over --ranks-per-node");
  plan_->add_option("--optimizer", plan.job.optimizer.kind, "sgd | adam")->capture_default_str();
  plan_->add_flag("--shard-optimizer", plan.job.shard_optimizer,
                  "as train: each rank holds 1/ranks of the optimizer state and of the reduced gradients");
  plan_->add_option("--data", plan.job.data,
                    "files | synthetic: files are prefetched (a second input batch) and fill the data store")
      ->capture_default_str();
  plan_->add_option("--data-store-mib", plan.job.data_store_mib,
                    "as train: MiB per rank for cached samples (default: a quarter of the node's available memory "
                    "over its ranks; 0: none)");
  plan_->add_option("--machine", plan.job.machine, "a machine file of rates (from --calibrate, or by hand)");
  plan_->add_option("--calibrate", plan.calibrate,
                    "time this machine's convolutions of the model and write them as a machine file, then stop");
  plan_->add_flag("--json", plan.json, "one JSON array, an object per layout");
  plan_->add_option("--backend", plan.job.backend, backend_help())->capture_default_str();

  // Read by expand_config before CLI11 sees the arguments; declared here for --help.
  for (CLI::App* sub : {train_, gen_, prep_, pred_, plan_})
    sub->add_option("--config", config_help_only_,
                    "read flags from this file (name = value per line, TOML/INI style; docs/usage.md); flags on "
                    "the command line win");
}

std::string CommandLine::command() const {
  for (CLI::App* sub : {train_, gen_, prep_, pred_, plan_})
    if (sub->parsed()) return sub->get_name();
  return "";
}

void CommandLine::expand_config(std::vector<std::string>& args) const {
  if (args.empty()) return;
  const CLI::App* sub = nullptr;
  for (const CLI::App* s : {train_, gen_, prep_, pred_})
    if (s->get_name() == args[0]) sub = s;
  if (!sub) return;  // CLI11 names what is wrong
  std::vector<std::string> out{args[0]}, rest;
  for (size_t i = 1; i < args.size(); ++i) {
    std::string path;
    if (args[i] == "--config") {
      H3D_USAGE_CHECK(i + 1 < args.size(), "--config needs a file name");
      path = args[++i];
    } else if (args[i].rfind("--config=", 0) == 0) {
      path = args[i].substr(9);
    } else {
      rest.push_back(args[i]);
      continue;
    }
    for (const ConfigEntry& e : parse_config_text(read_config_file(path), path, sub->get_name())) {
      const std::string where = "--config '" + path + "' line " + std::to_string(e.line);
      const CLI::Option* opt = e.key == "config" ? nullptr : sub->get_option_no_throw("--" + e.key);
      if (!opt && e.shared && e.key != "config") {  // fine if another subcommand has it
        bool elsewhere = false;
        for (const CLI::App* s : {train_, gen_, prep_, pred_}) elsewhere |= s->get_option_no_throw("--" + e.key) != nullptr;
        if (elsewhere) continue;
      }
      H3D_USAGE_CHECK(opt, where << ": '" << e.key << "' is not a flag of hybrid3d " << sub->get_name()
                                 << " (see hybrid3d " << sub->get_name() << " --help)");
      if (opt->get_expected_min() == 0) {  // a switch
        H3D_USAGE_CHECK(e.value == "true" || e.value == "false", where << ": '" << e.key << "' is a switch: true or false");
        if (e.value == "true") out.push_back("--" + e.key);
      } else {
        H3D_USAGE_CHECK(!e.value.empty(), where << ": '" << e.key << "' has no value");
        out.push_back("--" + e.key + "=" + e.value);
      }
    }
  }
  out.insert(out.end(), rest.begin(), rest.end());  // after the file's flags: the command line wins
  args = std::move(out);
}

void CommandLine::parse(int argc, const char* const* argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  expand_config(args);
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector last argument first
  app_.parse(args);
  if (train_->parsed()) finish_train();
  if (pred_->parsed()) finish_predict();
  if (plan_->parsed() && !plan_memory_.empty()) plan.job.memory_per_rank = parse_bytes(plan_memory_, "--memory-per-rank");
}

void CommandLine::finish_train() {
  H3D_USAGE_CHECK(train_layout_.old_overlap.empty(),
                  "--overlap is now two flags: --halo-overlap on|off (halo exchange behind each block's interior) "
                  "and --allreduce-overlap on|off|auto (gradient allreduce on a communication thread)");
  train.spatial_auto = train_layout_.spatial == "auto";
  if (train.spatial_auto) train_layout_.spatial = "1x1x1";  // chosen by the Trainer
  finish_layout(train_layout_, train.spatial, train.halo_overlap);
  if (!memory_per_rank_.empty()) train.memory_per_rank = parse_bytes(memory_per_rank_, "--memory-per-rank");
  train.allreduce_overlap = parse_overlap(allreduce_overlap_, "--allreduce-overlap", true);
  train.prefetch = !no_prefetch_;
  train.schedule.boundaries = parse_list<int64_t>(decay_boundaries_, "--decay-boundaries");
  train.schedule.factors = parse_list<double>(decay_factors_, "--decay-factors");
  train.seg_loss.class_weights = parse_list<float>(class_weights_, "--class-weights");
  if (train.steps < 0 || train.epochs < 0) H3D_THROW(UsageError, "--steps and --epochs must not be negative");
  if (train.batch_size < 1) H3D_THROW(UsageError, "--batch-size must be at least 1");
  if (train.log_every < 1) train.log_every = 1;
}

void CommandLine::finish_layout(const LayoutFlags& f, std::array<int, 3>& spatial, bool& halo_overlap) {
  threads = f.threads;
  if (threads < 0) H3D_THROW(UsageError, "--threads must be positive");
  spatial = parse_spatial(f.spatial);
  halo_overlap = parse_overlap(f.halo_overlap, "--halo-overlap", false) == Overlap::kOn;
}

void CommandLine::finish_predict() {
  H3D_USAGE_CHECK(pred_layout_.old_overlap.empty(),
                  "--overlap is now --window-overlap (the share of a window its neighbour covers); "
                  "--halo-overlap on|off is the halo exchange's");
  finish_layout(pred_layout_, predict.spatial, predict.halo_overlap);
}

}  // namespace h3d
