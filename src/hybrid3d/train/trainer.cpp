#include "hybrid3d/train/trainer.hpp"

#include <omp.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/core/profiler.hpp"
#include "hybrid3d/data/augment.hpp"
#include "hybrid3d/data/data_store.hpp"
#include "hybrid3d/core/rng.hpp"
#include "hybrid3d/data/hdf5_segmentation.hpp"
#include "hybrid3d/data/hdf5_source.hpp"
#include "hybrid3d/data/nifti_segmentation.hpp"
#include "hybrid3d/data/stage.hpp"
#include "hybrid3d/data/synthetic_segmentation.hpp"
#include "hybrid3d/data/synthetic_universe.hpp"
#include "hybrid3d/parallel/output_dir.hpp"
#include "hybrid3d/layers/deterministic.hpp"
#include "hybrid3d/train/checkpoint.hpp"
#include "hybrid3d/train/profile_report.hpp"
#include "hybrid3d/train/stop_signal.hpp"
#include "hybrid3d/train/network_weights.hpp"
#include "hybrid3d/train/safetensors.hpp"

namespace h3d {

namespace {

constexpr int64_t kValIndexOffset = int64_t(1) << 40;  // synthetic validation ids never meet training ids

// `budget`: the run's sample caches (null: --data-store-mib 0, no cache).
std::shared_ptr<SampleSource> open_source(const std::string& spec, const TrainOptions& o, const Comm& group,
                                          int64_t count, int64_t offset, const char* flag,
                                          const std::shared_ptr<CacheBudget>& budget,
                                          const DataStore** store = nullptr) {
  InputTransform t = parse_transform(o.transform);
  // Synthetic segmentation cases are cheap to make: they are made anew each time.
  if (spec == "synthetic" && is_segmentation(o.model))
    return std::make_shared<SyntheticSegmentation>(o.model.input_size, count, o.model.seed, offset);
  std::unique_ptr<SampleSource> source;  // generated or read, before any cache
  if (spec == "synthetic") {
    source = std::make_unique<SyntheticUniverses>(group, o.model.input_size, count, o.model.seed, offset, t);
  } else if (is_segmentation(o.model)) {
    H3D_USAGE_CHECK(parse_read_mode(o.read_mode) == ReadMode::kIndependent,
                    "--read-mode " << o.read_mode << " is for CosmoFlow files so far; segmentation cases are read "
                                   << "independently (leave --read-mode out)");
    const IntensityWindow window = parse_intensity_window(o.intensity_window, "--intensity-window");
    if (NiftiSegmentation::recognises(spec))
      source = std::make_unique<NiftiSegmentation>(group, spec, o.model.classes, window, o.model.input_size, flag);
    else
      source = std::make_unique<Hdf5Segmentation>(group, spec, o.model.classes, window, flag);
  } else {
    source = std::make_unique<Hdf5Universes>(group, spec, t, parse_read_mode(o.read_mode), flag);
  }
  if (!budget) return source;
  auto kept = std::make_shared<DataStore>(std::move(source), budget);
  if (store) *store = kept.get();
  return kept;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string hms(double s) {
  char buf[32];
  int64_t t = int64_t(s + 0.5);
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(t / 3600), (long long)(t / 60 % 60),
                (long long)(t % 60));
  return buf;
}

}  // namespace

Trainer::Trainer(const Comm& world, TrainOptions o) : o_(std::move(o)) {
  grid_ = std::make_unique<ProcessGrid>(world, o_.spatial);
  H3D_USAGE_CHECK(o_.batch_size >= grid_->data_groups(),
                  "--batch-size " << o_.batch_size << " is smaller than the " << grid_->data_groups()
                                  << " data-parallel groups (" << grid_->describe()
                                  << "); use a batch of at least " << grid_->data_groups()
                                  << " or more spatial ranks per sample");
  backend_ = make_backend(o_.backend);
  const ReadMode read_mode = parse_read_mode(o_.read_mode);  // a bad value is refused whatever the data
  opt_ = make_optimizer(o_.optimizer);

  open_data(world, grid_->group());
  segmentation_ = is_segmentation(o_.model);
  // The synthetic universes generate with collectives on the group's
  // communicator: they cannot run beside the step's own messages.
  // Collective and naive reads communicate on their own communicator: from
  // a background thread only where MPI allows threads to.
  const bool synthetic = o_.data == "synthetic";
  const bool loads_communicate = !synthetic && read_mode != ReadMode::kIndependent;
  if (o_.prefetch && (!synthetic || segmentation_) && (!loads_communicate || mpi_thread_multiple()))
    prefetch_ = std::make_unique<Prefetcher>([this](const std::vector<int64_t>& ids, Tensor& x, std::vector<float>& t) {
      load_batch(*train_src_, ids, x, t);
    });
  auto ext = train_src_->extent();
  H3D_USAGE_CHECK(ext[0] == o_.model.input_size && ext[1] == ext[0] && ext[2] == ext[0],
                  "the data (" << train_src_->describe() << ") does not match --input-size " << o_.model.input_size
                               << "; use --input-size " << ext[0] << " (cubic samples)");
  H3D_USAGE_CHECK(train_src_->channels() == model_in_channels(o_.model),
                  "the data has " << train_src_->channels() << " channels, the model expects "
                                  << model_in_channels(o_.model) << " (--in-channels)");
  if (segmentation_) {
    H3D_USAGE_CHECK(train_src_->classes() > 0, "--model " << o_.model.model << " segments, but the data ("
                                                           << train_src_->describe() << ") has no labels");
    H3D_USAGE_CHECK(train_src_->classes() <= o_.model.classes,
                    "the data has " << train_src_->classes() << " classes, more than --classes " << o_.model.classes);
    o_.seg_loss.validate(o_.model.classes);
  } else {
    H3D_USAGE_CHECK(train_src_->classes() == 0, "the data (" << train_src_->describe() << ") is for segmentation; "
                                                             << "use --model unet3d");
  }
  for (const auto* src : {val_src_.get(), test_src_.get()})
    if (src)
      H3D_USAGE_CHECK(src->extent() == ext && src->channels() == train_src_->channels(),
                      "the evaluation data (" << src->describe() << ") does not match the training data ("
                                              << train_src_->describe() << ")");
  sampler_ = std::make_unique<TrainSampler>(train_src_->size(), o_.batch_size, o_.model.seed,
                                            parse_last_batch(o_.last_batch));

  net_ = build_model(o_.model);
  ActShape in;
  in.channels = model_in_channels(o_.model);
  in.dist = Distribution::balanced(ext, grid_->spatial(), model_alignment(o_.model));
  in.dist.require_nonempty("input");
  if (o_.deterministic) use_deterministic_tiles(in, model_alignment(o_.model));
  net_.setup(in, *grid_);
  H3D_USAGE_CHECK(o_.bucket_mib > 0, "--allreduce-bucket-mib must be positive (for example 8)");
  reducer_.plan(*grid_, net_.params_by_layer(), int64_t(o_.bucket_mib * (1 << 20)), o_.allreduce_overlap,
                omp_get_max_threads());
  block_ = in.dist.box(grid_->spatial_rank());
  if (!o_.init.empty()) load_network_weights(net_, o_.init, "--init");

  steps_per_epoch_ = sampler_->steps_per_epoch();
  H3D_USAGE_CHECK(!(o_.steps > 0 && o_.epochs > 0), "give --steps or --epochs, not both");
  total_steps_ = o_.steps > 0 ? o_.steps : std::max<int64_t>(1, o_.epochs) * steps_per_epoch_;
  o_.schedule.total_steps = total_steps_;
  o_.schedule.validate();
  // Refuse an unwritable destination now rather than after training.
  require_writable_parent("--save", o_.save);
  require_writable_parent("--profile", o_.profile);
  require_writable_parent("--metrics", o_.metrics);
  H3D_USAGE_CHECK(o_.checkpoint_every >= 0 && o_.checkpoint_minutes >= 0 && o_.stop_after >= 0 && o_.keep >= 1,
                  "--checkpoint-every, --checkpoint-minutes and --stop-after must not be negative, --keep at least 1");
  H3D_USAGE_CHECK(!o_.checkpoint_dir.empty() || (o_.checkpoint_every == 0 && o_.checkpoint_minutes == 0 &&
                                                  o_.stop_after == 0 && o_.resume != "auto"),
                  "--checkpoint-every, --checkpoint-minutes, --stop-after and --resume auto need --checkpoint-dir");
  if (!o_.checkpoint_dir.empty()) {
    create_output_dir(world, o_.checkpoint_dir, "--checkpoint-dir");
    // A directory too small for even one checkpoint is refused now; one too
    // small for --keep of them is only warned about (older ones may go).
    // Only rank 0 writes checkpoints, so only its view of the disk counts.
    const std::string refusal = run_on_root(world, [&] {
      const int slots = o_.optimizer.kind == "adam" ? 2 : o_.optimizer.momentum != 0 ? 1 : 0;
      const std::string warning = check_checkpoint_space(o_.checkpoint_dir, checkpoint_bytes(net_, slots), o_.keep);
      if (!warning.empty()) std::fprintf(stderr, "hybrid3d: warning: %s\n", warning.c_str());
    });
    if (!refusal.empty()) throw UsageError(refusal);
  }
  if (!o_.resume.empty()) resume_from_checkpoint(world);
  metrics_.open(o_.metrics, world.rank() == 0, start_step_ > 0);
}

Trainer::~Trainer() = default;

std::vector<int64_t> Trainer::global_batch(int64_t step) const { return sampler_->batch(step); }

nlohmann::json Trainer::run_info() const {
  const ModelOptions& m = o_.model;
  return {{"model", {{"model", m.model}, {"input_size", m.input_size}, {"in_channels", model_in_channels(m)},
                     {"kernel_size", m.kernel_size}, {"batchnorm", m.batchnorm}, {"dropout", m.dropout},
                     {"classes", m.classes}, {"base_channels", m.base_channels}, {"levels", m.levels}}},
          {"optimizer", o_.optimizer.kind},
          {"seed", m.seed},
          {"batch_size", o_.batch_size},
          {"layout", grid_->describe()},
          {"data", o_.data}};
}

void Trainer::resume_from_checkpoint(const Comm& world) {
  const bool autom = o_.resume == "auto";
  const std::string spec = autom ? o_.checkpoint_dir : o_.resume;
  // Rank 0 finds and verifies; every rank then loads the same checkpoint.
  char path[1024] = {}, warnings[4096] = {};
  if (world.rank() == 0) {
    const FoundCheckpoint f = find_checkpoint(spec);
    std::snprintf(path, sizeof path, "%s", f.path.c_str());
    std::snprintf(warnings, sizeof warnings, "%s", f.warnings.c_str());
  }
  world.bcast(path, sizeof path, 0);
  world.bcast(warnings, sizeof warnings, 0);
  if (world.rank() == 0 && warnings[0]) std::fprintf(stderr, "hybrid3d: warning: %s", warnings), std::fflush(stderr);
  if (path[0] == 0) {
    H3D_USAGE_CHECK(autom, "--resume '" << spec << "': no usable checkpoint there" << (warnings[0] ? " (see above)" : ""));
    if (world.rank() == 0 && !o_.quiet) std::printf("resume: no checkpoint in '%s' yet; starting afresh\n", spec.c_str());
    return;
  }
  const LoadedCheckpoint c = load_checkpoint_on_root(world, path);
  const nlohmann::json now = run_info();
  for (const char* key : {"model", "optimizer", "seed", "batch_size"})
    H3D_USAGE_CHECK(c.run.contains(key) && c.run[key] == now[key],
                    "--resume: checkpoint '" << path << "' was written with " << key << " "
                                             << (c.run.contains(key) ? c.run[key].dump() : "?") << ", this run has "
                                             << now[key].dump() << "; use the same, or start afresh");
  H3D_USAGE_CHECK(c.step <= total_steps_, "--resume: checkpoint '" << path << "' is at step " << c.step
                                                                   << ", past this run's " << total_steps_ << " steps");
  start_step_ = c.step;
  last_checkpoint_step_ = c.step;
  if (world.rank() == 0 && !o_.quiet)
    std::printf("resume: %s at step %lld (written under %s)\n", path, (long long)c.step,
                c.run.contains("layout") && c.run["layout"].is_string() ? c.run["layout"].get<std::string>().c_str()
                                                                         : "?");
}

LoadedCheckpoint Trainer::load_checkpoint_on_root(const Comm& world, const std::string& path) {
  // Rank 0 reads and verifies the checkpoint; the others get its contents
  // over MPI. So the checkpoint directory need only be on rank 0's node (a
  // node-local disk works), and the file system serves one reader.
  LoadedCheckpoint c;
  std::string run_text;
  const std::string failure = run_on_root(world, [&] {
    c = load_checkpoint(path, net_, *opt_);
    run_text = c.run.dump();
  });
  if (!failure.empty()) throw UsageError(failure);
  auto bcast_string = [&](std::string& s) {
    int64_t n = int64_t(s.size());
    world.bcast(&n, sizeof n, 0);
    s.resize(size_t(n));
    world.bcast(&s[0], n, 0);
  };
  world.bcast(&c.step, sizeof c.step, 0);
  bcast_string(run_text);
  if (world.rank() != 0) c.run = nlohmann::json::parse(run_text);
  for (auto* p : net_.params()) world.bcast(p->value.data(), p->value.numel() * int64_t(sizeof(float)), 0);
  for (auto* b : net_.buffers()) world.bcast(b->value.data(), b->value.numel() * int64_t(sizeof(float)), 0);
  OptimizerState st;
  if (world.rank() == 0) st = opt_->state(net_.params());
  int64_t count = int64_t(st.tensors.size());
  world.bcast(&st.steps, sizeof st.steps, 0);
  world.bcast(&count, sizeof count, 0);
  st.tensors.resize(size_t(count));
  for (auto& t : st.tensors) {
    bcast_string(t.first);
    int64_t n = int64_t(t.second.size());
    world.bcast(&n, sizeof n, 0);
    t.second.resize(size_t(n));
    world.bcast(t.second.data(), n * int64_t(sizeof(float)), 0);
  }
  if (world.rank() != 0) opt_->load_state(net_.params(), st);
  return c;
}

void Trainer::checkpoint(int64_t steps_done) {
  const auto t0 = std::chrono::steady_clock::now();
  // Rank 0 writes; every rank learns the outcome, so a failure (a full disk)
  // stops the whole job alike, with one message, instead of an abort.
  const std::string failure = run_on_root(
      grid_->world(), [&] { write_checkpoint(o_.checkpoint_dir, steps_done, net_, *opt_, run_info(), o_.keep); });
  if (!failure.empty()) {
    H3D_THROW(CheckpointError, "the checkpoint at step " << steps_done << " could not be written (" << failure
                                   << "); training stopped. "
                                   << (last_checkpoint_step_ > 0
                                           ? "The checkpoint of step " + std::to_string(last_checkpoint_step_) +
                                                 " in '" + o_.checkpoint_dir + "' is intact"
                                           : std::string("No earlier checkpoint exists"))
                                   << ": free space there (or give another --checkpoint-dir) and resubmit with "
                                      "--resume auto");
  }
  last_checkpoint_step_ = steps_done;
  if (grid_->world().rank() == 0 && !o_.quiet) {
    int64_t floats = 0;
    for (auto* p : net_.params()) floats += p->value.numel();
    std::printf("checkpoint at step %lld in %.2f s (%.0f MiB of weights, plus optimizer state)\n",
                (long long)steps_done, seconds_since(t0), double(floats) * 4 / (1 << 20));
    std::fflush(stdout);
  }
}

void Trainer::open_data(const Comm& world, const Comm& group) {
  const bool split = o_.val_fraction > 0 || o_.test_fraction > 0;
  if (!o_.stage_dir.empty()) {
    const bool quiet = o_.quiet;
    auto stage = [&](std::string& spec, const char* name) {
      if (!spec.empty() && spec != "synthetic") spec = stage_dataset(world, spec, o_.stage_dir, name, quiet);
    };
    stage(o_.data, "train");
    stage(o_.val_data, "val");
    stage(o_.test_data, "test");
  }
  H3D_USAGE_CHECK(!(o_.val_fraction > 0 && !o_.val_data.empty()), "give --val-data or --val-fraction, not both");
  H3D_USAGE_CHECK(!(o_.test_fraction > 0 && !o_.test_data.empty()), "give --test-data or --test-fraction, not both");
  // One budget for every sample cache of the run, the same on every rank
  // (the synthetic generator and collective readers need the same decisions
  // on the ranks of a group).
  std::shared_ptr<CacheBudget> budget;
  if (o_.data_store_mib != 0) {
    const double limit = o_.data_store_mib > 0 ? o_.data_store_mib * double(1 << 20)
                                               : double(default_cache_bytes(ranks_on_this_node(world)));
    budget = std::make_shared<CacheBudget>(int64_t(-world.allreduce_max(-limit)));
  }
  std::shared_ptr<SampleSource> all =
      open_source(o_.data, o_, group, o_.train_samples, 0, "--data", budget, &store_);
  if (split) {
    const Split parts = split_by_fraction(all->size(), o_.val_fraction, o_.test_fraction, o_.model.seed);
    auto held_out = [](const std::vector<int64_t>& ids, const char* flag) {
      return std::to_string(ids.size()) + " samples held out by " + flag;
    };
    train_src_ = std::make_shared<SubsetSource>(
        all, parts.train, std::to_string(parts.train.size()) + " training samples of " + all->describe());
    if (!parts.val.empty())
      val_src_ = std::make_shared<SubsetSource>(all, parts.val, held_out(parts.val, "--val-fraction"));
    if (!parts.test.empty())
      test_src_ = std::make_shared<SubsetSource>(all, parts.test, held_out(parts.test, "--test-fraction"));
  } else {
    train_src_ = all;
  }
  // Synthetic evaluation sets draw from id ranges of their own, so they never meet the training ids.
  if (!o_.val_data.empty())
    val_src_ = open_source(o_.val_data, o_, group, o_.val_samples, o_.val_data == "synthetic" ? kValIndexOffset : 0,
                           "--val-data", budget);
  else if (!split && o_.data == "synthetic" && o_.val_samples > 0)
    val_src_ = open_source("synthetic", o_, group, o_.val_samples, kValIndexOffset, "--val-data", budget);
  if (!o_.test_data.empty())
    test_src_ = open_source(o_.test_data, o_, group, o_.val_samples,
                            o_.test_data == "synthetic" ? 2 * kValIndexOffset : 0, "--test-data", budget);
  // Segmentation volumes larger than the model's input are cropped (at random
  // for training with --random-crop, at the centre otherwise), and flipped.
  const int64_t S = o_.model.input_size;
  const std::array<int64_t, 3> cube{S, S, S};
  H3D_USAGE_CHECK(!(o_.random_crop || o_.flip) || is_segmentation(o_.model),
                  "--random-crop and --flip are for segmentation models (--model unet3d)");
  if (!is_segmentation(o_.model)) return;
  if (o_.random_crop || o_.flip || train_src_->extent() != cube) {
    train_src_ = std::make_shared<AugmentedSource>(train_src_, S, o_.model.seed, o_.random_crop, o_.flip);
    augmented_ = true;
  }
  for (auto* src : {&val_src_, &test_src_})
    if (*src && (*src)->extent() != cube) *src = std::make_shared<AugmentedSource>(*src, S, o_.model.seed, false, false);
}

void Trainer::local_range(int64_t& lo, int64_t& hi) const {
  int64_t g = grid_->group_index(), G = grid_->data_groups();
  lo = g * o_.batch_size / G;
  hi = (g + 1) * o_.batch_size / G;
}

void Trainer::load_batch(SampleSource& src, const std::vector<int64_t>& ids, Tensor& x, std::vector<float>& t) {
  int64_t c = src.channels(), vol = block_.volume(), n = int64_t(ids.size());
  auto e = block_.extents();
  x.reserve(net_.input_capacity_wish(n));
  x.reshape_uninit({n, c, e[0], e[1], e[2]});
  const int64_t nt = src.targets_of(block_);
  t.assign(size_t(n * nt), 0.0f);
  for (int64_t s = 0; s < n; ++s) src.load(ids[size_t(s)], block_, x.data() + s * c * vol, t.data() + s * nt);
}

std::vector<int64_t> Trainer::local_batch(int64_t step) const {
  auto ids = global_batch(step);
  int64_t lo, hi;
  local_range(lo, hi);
  std::vector<int64_t> mine(ids.begin() + lo, ids.begin() + hi);
  if (augmented_)  // the augmentation draws from (epoch, sample)
    for (auto& id : mine) id += step / steps_per_epoch_ * train_src_->size();
  return mine;
}

double Trainer::loss_and_gradient(int64_t step) {
  double loss = 0;
  if (segmentation_) {
    // Per-voxel loss over the whole global batch volume (every rank's voxels once).
    labels_.assign(targets_.begin(), targets_.end());
    loss = segmentation_loss(grid_->world(), o_.seg_loss, output_, labels_, dout_, o_.deterministic).loss;
  } else {
    // MSE over the global mini-batch: the head is replicated in each group, so
    // summing over one rank per group (the replicas communicator) is exact.
    const double denom = double(o_.batch_size) * SampleSource::kTargets;
    double sse = 0, largest = 0;
    dout_.reshape_like(output_.shape());
    for (int64_t i = 0; i < output_.numel(); ++i) {
      double d = double(output_[i]) - targets_[size_t(i)];
      sse += d * d;
      largest = std::max(largest, d * d);
      dout_[i] = float(2.0 * d / denom);
    }
    if (o_.deterministic) {  // the terms added exactly, whatever the groups
      const double bound = grid_->world().allreduce_max(std::isfinite(sse) ? largest : HUGE_VAL) * denom;
      ExactSum exact(1, bound);
      for (int64_t i = 0; i < output_.numel(); ++i) {
        const double d = double(output_[i]) - targets_[size_t(i)];
        exact.add(0, d * d);
      }
      exact.allreduce(grid_->replicas());
      sse = exact.value(0);
    } else {
      grid_->replicas().allreduce_sum(&sse, 1);
    }
    loss = sse / denom;
  }
  if (!std::isfinite(loss) && !o_.skip_nonfinite)
    H3D_THROW(UsageError, "the loss is " << loss << " at step " << step << "; " << where_nonfinite(step)
                                          << "; training stopped (lower --lr, check the input data and --transform, "
                                          << "or --skip-nonfinite)");
  return loss;
}

std::string Trainer::where_nonfinite(int64_t step) {
  // Replays the step's forward pass (the same data, weights and dropout
  // masks: all functions of the step) looking at every layer's output; the
  // lowest layer with a non-finite value on any rank is where it began.
  // Collective: every rank sees the same non-finite loss and comes here.
  if (prefetch_) prefetch_->wait();  // the loader is not thread-safe
  Tensor x;
  std::vector<float> t;
  load_batch(*train_src_, local_batch(step), x, t);
  StepContext ctx = step_context(step, true);
  const int64_t none = int64_t(net_.layers().size());
  int64_t first = none;
  net_.forward(ctx, std::move(x), [&](int64_t layer, const Tensor& out) {
    if (first != none) return;
    const float* v = out.data();
    for (int64_t i = 0; i < out.numel(); ++i)
      if (!std::isfinite(v[i])) {
        first = layer;
        return;
      }
  });
  first = -int64_t(grid_->world().allreduce_max(-double(first)));
  if (first == none) return "every layer's output is finite, so the loss itself overflowed";
  if (first < 0) return "the input data of this step is not finite (check the files and --transform)";
  return "the first non-finite values are in the output of layer '" + net_.layers()[size_t(first)]->name() + "'";
}

std::string Trainer::first_nonfinite_gradient() {
  // The gradients are reduced, so every rank finds the same answer.
  const auto& layers = net_.layers();
  for (size_t l = layers.size(); l-- > 0;)
    for (auto* p : layers[l]->params()) {
      const float* g = p->grad.data();
      for (int64_t i = 0; i < p->grad.numel(); ++i)
        if (!std::isfinite(g[i])) return p->name;
    }
  return "";
}

StepContext Trainer::step_context(int64_t step, bool training) const {
  int64_t lo, hi;
  local_range(lo, hi);
  return make_step_context(backend_.get(), grid_.get(), o_.model.seed, o_.halo_overlap, training, step, lo,
                           hi - lo);
}

double Trainer::train_step(int64_t step) {
  const std::vector<int64_t> mine = local_batch(step);
  {
    ProfileScope timed(prof::kDataWait);
    const double t0 = Profiler::now();
    if (prefetch_) {
      prefetch_->take(mine, input_, targets_);
      if (step + 1 < total_steps_) prefetch_->start(local_batch(step + 1));
    } else {
      load_batch(*train_src_, mine, input_, targets_);
    }
    last_data_wait_ = Profiler::now() - t0;
  }

  StepContext ctx = step_context(step, true);
  output_ = net_.forward(ctx, std::move(input_));

  const double loss = loss_and_gradient(step);
  net_.backward(ctx, std::move(dout_), [this](const std::vector<Param*>& ps) { reducer_.ready(ps); });
  reducer_.finish();
  last_skipped_ = false;
  const std::string bad = std::isfinite(loss) ? first_nonfinite_gradient() : "(the loss)";
  if (!bad.empty()) {
    H3D_USAGE_CHECK(o_.skip_nonfinite, "the gradient of '" << bad << "' is not finite at step " << step
                                                            << " (the first such parameter in backward order); "
                                                            << "training stopped (lower --lr, or --skip-nonfinite)");
    ++skipped_steps_;
    last_skipped_ = true;
    return loss;  // no update: the weights stay those of the last good step
  }
  ProfileScope timed(prof::kOptimizer);
  opt_->step(net_.params(), o_.schedule.at(step));
  return loss;
}

ValidationResult Trainer::evaluate(SampleSource* src) {
  ValidationResult r;
  if (!src) return r;
  if (prefetch_) prefetch_->wait();  // HDF5 is not thread-safe
  const int64_t n = src->size(), batches = eval_batches(n, o_.batch_size);
  int64_t lo, hi;
  local_range(lo, hi);
  std::vector<double> acc(9, 0.0);  // sse[4], sae[4], count
  SegMetrics seg(segmentation_ ? o_.model.classes : 0);
  Tensor x;
  std::vector<float> t, weights;
  std::vector<int64_t> ids;
  for (int64_t b = 0; b < batches; ++b) {
    eval_batch(n, o_.batch_size, b, ids, weights);
    const std::vector<int64_t> mine(ids.begin() + lo, ids.begin() + hi);
    load_batch(*src, mine, x, t);
    StepContext ctx = step_context(0, false);
    const Tensor& y = net_.forward(ctx, std::move(x));
    if (segmentation_) {
      labels_.assign(t.begin(), t.end());
      seg.add(y, labels_, o_.seg_loss.ignore_label,
              std::vector<float>(weights.begin() + lo, weights.begin() + hi));
      for (int64_t p = lo; p < hi; ++p) acc[8] += weights[size_t(p)];
      continue;
    }
    for (int64_t i = 0; i < y.numel(); ++i) {
      const double w = weights[size_t(lo + i / SampleSource::kTargets)];
      const double d = double(y[i]) - t[size_t(i)];
      acc[size_t(i % 4)] += w * d * d;
      acc[size_t(4 + i % 4)] += w * std::abs(d);
    }
    for (int64_t p = lo; p < hi; ++p) acc[8] += weights[size_t(p)];
  }
  grid_->replicas().allreduce_sum(acc.data(), int64_t(acc.size()));
  r.samples = int64_t(acc[8]);
  if (segmentation_) {
    seg.reduce(grid_->world());
    for (int64_t c = 0; c < seg.classes(); ++c) r.dice.push_back(seg.dice(c)), r.iou.push_back(seg.iou(c));
    r.accuracy = seg.accuracy();
    return r;
  }
  if (r.samples == 0) return r;
  for (int j = 0; j < 4; ++j) {
    r.mse_per_param[size_t(j)] = acc[size_t(j)] / acc[8];
    r.mae_per_param[size_t(j)] = acc[size_t(4 + j)] / acc[8];
    r.mse += r.mse_per_param[size_t(j)] / 4;
  }
  return r;
}

void Trainer::check_replicas_identical() {
  // A fingerprint of every weight's bits; min and max over ranks must agree.
  uint64_t h = kFnvOffset;
  for (auto* p : net_.params()) h = fnv1a(p->value.data(), size_t(p->value.numel()) * sizeof(float), h);
  double v = double(h >> 12);
  double mx = grid_->world().allreduce_max(v), mn = -grid_->world().allreduce_max(-v);
  H3D_CHECK(mx == mn, "the ranks' weights differ after training (an internal error: please report it)");
}

void Trainer::save(const std::string& path) {
  if (grid_->world().rank() != 0) return;
  std::vector<NamedTensor> ts;
  for (auto* p : net_.params()) ts.push_back({p->name, &p->value, false});
  for (auto* b : net_.buffers()) ts.push_back({b->name, &b->value, b->is_integer});
  save_safetensors(path, ts, {{"model", o_.model.model}, {"input_size", std::to_string(o_.model.input_size)}});
}

void Trainer::run() {
  const bool root = grid_->world().rank() == 0;
  auto say = [&](const std::string& s) {
    if (root && !o_.quiet) std::printf("%s\n", s.c_str()), std::fflush(stdout);
  };
  say("hybrid3d: " + grid_->describe() + ", backend " + backend_->name() + ", " +
      std::to_string(omp_get_max_threads()) + " thread(s) per rank");
  say("model " + o_.model.model + ": " + net_.summary());
  say("data: " + train_src_->describe() + (val_src_ ? "; validation: " + val_src_->describe() : "") +
      (test_src_ ? "; test: " + test_src_->describe() : ""));
  auto t0 = std::chrono::steady_clock::now();
  int64_t val_every = o_.val_every > 0 ? o_.val_every : steps_per_epoch_;
  auto run_evaluation = [&](SampleSource* src, const char* what, const char* type, int64_t step) {
    if (!src) return;
    ValidationResult v = evaluate(src);
    char buf[512];
    if (segmentation_) {
      std::string dice, iou;
      for (size_t c = 0; c < v.dice.size(); ++c) {
        char d[32];
        std::snprintf(d, sizeof d, " %.4f", v.dice[c]);
        dice += d;
        std::snprintf(d, sizeof d, " %.4f", v.iou[c]);
        iou += d;
      }
      std::snprintf(buf, sizeof buf, "%s at step %lld: dice per class%s, iou%s, voxel accuracy %.4f, %lld samples",
                    what, (long long)step, dice.c_str(), iou.c_str(), v.accuracy, (long long)v.samples);
      say(buf);
      // NaN (a class absent from truth and prediction) is null in JSON.
      auto finite_or_null = [](const std::vector<double>& xs) {
        nlohmann::json a = nlohmann::json::array();
        for (double x : xs) a.push_back(std::isfinite(x) ? nlohmann::json(x) : nlohmann::json());
        return a;
      };
      metrics_.write({{"type", type}, {"step", step}, {"dice", finite_or_null(v.dice)}, {"iou", finite_or_null(v.iou)},
                      {"accuracy", v.accuracy}, {"samples", v.samples}});
      return;
    }
    std::snprintf(buf, sizeof buf, "%s at step %lld: mse %.4f (per parameter %.4f %.4f %.4f %.4f), %lld samples",
                  what, (long long)step, v.mse, v.mse_per_param[0], v.mse_per_param[1], v.mse_per_param[2],
                  v.mse_per_param[3], (long long)v.samples);
    say(buf);
    metrics_.write({{"type", type}, {"step", step}, {"mse", v.mse}, {"mse_per_param", v.mse_per_param},
                    {"mae_per_param", v.mae_per_param}, {"samples", v.samples}});
  };
  auto run_validation = [&](int64_t step) { run_evaluation(val_src_.get(), "validation", "val", step); };
  double window_t = 0;
  int64_t window_n = 0;
  Profiler& profiler = Profiler::instance();
  int64_t profiled_steps = 0;
  auto last_checkpoint = std::chrono::steady_clock::now();
  for (int64_t step = start_step_; step < total_steps_; ++step) {
    if (!o_.profile.empty() && step == std::min<int64_t>(start_step_ + 1, total_steps_ - 1)) {
      // The first step creates primitives and touches fresh memory: leave it
      // out of the profile unless it is the only one.
      profiler.enable(true);
      profiler.clear();
      for (const auto& name : net_.layers()) {
        profiler.declare(name->name() + ".forward");
        profiler.declare(name->name() + ".backward");
      }
      for (const char* c : {prof::kHaloTotal, prof::kHaloExposed, prof::kAllreduceTotal, prof::kAllreduceExposed,
                            prof::kDataWait, prof::kOptimizer, prof::kStep})
        profiler.declare(c);
    }
    auto ts = std::chrono::steady_clock::now();
    double loss = train_step(step);
    double dt = seconds_since(ts);
    if (profiler.enabled()) {
      profiler.add(prof::kStep, dt);
      ++profiled_steps;
    }
    window_t += dt;
    ++window_n;
    double sps = double(o_.batch_size) / dt;
    metrics_.write({{"type", "train"}, {"step", step}, {"epoch", step / steps_per_epoch_}, {"loss", loss},
                    {"lr", o_.schedule.at(step)}, {"step_time_s", dt}, {"samples_per_s", sps},
                    {"data_wait_s", last_data_wait_}, {"skipped", last_skipped_}});
    if ((step + 1) % o_.log_every == 0 || step + 1 == total_steps_) {
      double avg = window_t / double(window_n);
      char buf[256];
      std::snprintf(buf, sizeof buf, "step %lld/%lld  loss %.5f  lr %.2e  %.2f samples/s  elapsed %s  left %s",
                    (long long)(step + 1), (long long)total_steps_, loss, o_.schedule.at(step),
                    double(o_.batch_size) / avg, hms(seconds_since(t0)).c_str(),
                    hms(avg * double(total_steps_ - step - 1)).c_str());
      say(buf);
      window_t = 0;
      window_n = 0;
    }
    if ((step + 1) % val_every == 0 && step + 1 != total_steps_) run_validation(step + 1);
    // A signal on any rank stops every rank after this step.
    if (grid_->world().allreduce_max(stop_requested() ? 1.0 : 0.0) > 0 && step + 1 < total_steps_) {
      stopped_by_signal_ = true;
      if (!o_.checkpoint_dir.empty()) checkpoint(step + 1);
      say("stopped by a signal after step " + std::to_string(step + 1) + " of " + std::to_string(total_steps_) +
          (o_.checkpoint_dir.empty() ? std::string("; no --checkpoint-dir, nothing saved")
                                     : "; checkpoint in " + o_.checkpoint_dir + " (continue with --resume auto)"));
      return;
    }
    if (o_.checkpoint_dir.empty()) continue;
    // Rank 0's clock decides time-based checkpoints, for every rank alike.
    int due = (o_.checkpoint_every > 0 && (step + 1) % o_.checkpoint_every == 0) ||
              (o_.checkpoint_minutes > 0 && seconds_since(last_checkpoint) >= 60 * o_.checkpoint_minutes);
    grid_->world().bcast(&due, sizeof due, 0);
    const bool stop = o_.stop_after > 0 && step + 1 - start_step_ == o_.stop_after && step + 1 < total_steps_;
    if (due || stop || step + 1 == total_steps_) {
      checkpoint(step + 1);
      last_checkpoint = std::chrono::steady_clock::now();
    }
    if (stop) {
      say("stopped after " + std::to_string(o_.stop_after) + " steps of this job, at step " + std::to_string(step + 1) +
          " of " + std::to_string(total_steps_) + "; checkpoint in " + o_.checkpoint_dir +
          " (continue with --resume auto)");
      return;
    }
  }
  if (profiler.enabled()) {
    profiler.enable(false);  // validation is not profiled
    std::vector<std::string> names;
    for (const auto& l : net_.layers()) names.push_back(l->name());
    report_profile(*grid_, names, profiled_steps, o_.profile, root);
  }
  run_validation(total_steps_);
  run_evaluation(test_src_.get(), "test", "test", total_steps_);
  if (skipped_steps_ > 0)
    say("skipped " + std::to_string(skipped_steps_) + " step(s) whose loss or gradients were not finite");
  if (const DataStore* store = store_) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "data store (rank 0): %lld blocks from memory, %lld loaded, %.1f MiB kept (all sets: %.1f of %.1f MiB)",
                  (long long)store->hits(), (long long)store->misses(), double(store->bytes()) / (1 << 20),
                  double(store->budget().used()) / (1 << 20), double(store->budget().limit()) / (1 << 20));
    say(buf);
  }
  check_replicas_identical();
  if (!o_.save.empty()) {
    save(o_.save);
    say("saved " + o_.save);
  }
}

}  // namespace h3d
