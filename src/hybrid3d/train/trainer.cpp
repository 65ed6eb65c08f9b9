#include "hybrid3d/train/trainer.hpp"

#include <omp.h>

#include <cmath>
#include <cstdio>

#include "hybrid3d/backend/registry.hpp"
#include "hybrid3d/core/error.hpp"
#include "hybrid3d/core/profiler.hpp"
#include "hybrid3d/data/hdf5_source.hpp"
#include "hybrid3d/models/registry.hpp"
#include "hybrid3d/parallel/output_dir.hpp"
#include "hybrid3d/train/memory_check.hpp"
#include "hybrid3d/train/network_weights.hpp"
#include "hybrid3d/train/nonfinite_guard.hpp"
#include "hybrid3d/train/profile_report.hpp"
#include "hybrid3d/train/stop_signal.hpp"

namespace h3d {

namespace {

std::string hms(double s) {
  char buf[32];
  int64_t t = int64_t(s + 0.5);
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(t / 3600), (long long)(t / 60 % 60),
                (long long)(t % 60));
  return buf;
}

}  // namespace

Trainer::Trainer(const Comm& world, TrainOptions o) : o_(std::move(o)) {
  // The layout (--spatial auto), and below, once everything else is known
  // to be valid, whether it fits (train/memory_check.hpp).
  // Rank 0 plans; the others learn its answer (or its refusal).
  PlanRequest plan = plan_request(o_, world.size(), ranks_on_this_node(world));
  if (o_.spatial_auto) {
    const std::string failure = run_on_root(world, [&] { o_.spatial = choose_layout(plan); });
    if (!failure.empty()) throw UsageError(failure);
    world.bcast(o_.spatial.data(), int64_t(sizeof(int) * 3), 0);
    if (world.rank() == 0 && !o_.quiet)
      std::printf("--spatial auto: %dx%dx%d, the fastest layout predicted to fit (hybrid3d plan lists them)\n",
                  o_.spatial[0], o_.spatial[1], o_.spatial[2]);
  }
  plan.base.spatial = o_.spatial;
  grid_ = std::make_unique<ProcessGrid>(world, o_.spatial);
  H3D_USAGE_CHECK(o_.batch_size >= grid_->data_groups(),
                  "--batch-size " << o_.batch_size << " is smaller than the " << grid_->data_groups()
                                  << " data-parallel groups (" << grid_->describe()
                                  << "); use a batch of at least " << grid_->data_groups()
                                  << " or more spatial ranks per sample");
  backend_ = make_backend(o_.backend);
  const ReadMode read_mode = parse_read_mode(o_.read_mode);  // a bad value is refused whatever the data
  opt_ = make_optimizer(o_.optimizer);
  task_ = make_task(o_);

  data_ = open_training_data(world, grid_->group(), o_);
  // The synthetic universes generate with collectives on the group's
  // communicator: they cannot run beside the step's own messages.
  // Collective and naive reads communicate on their own communicator: from
  // a background thread only where MPI allows threads to.
  const bool synthetic = o_.data == "synthetic", segmentation = is_segmentation(o_.model);
  const bool loads_communicate = !synthetic && read_mode != ReadMode::kIndependent;
  if (o_.prefetch && (!synthetic || segmentation) && (!loads_communicate || mpi_thread_multiple()))
    prefetch_ = std::make_unique<Prefetcher>(
        [this](const std::vector<int64_t>& ids, Tensor& x, std::vector<float>& t) {
          load_batch(*data_.train, ids, x, t);
        },
        [this](const std::vector<int64_t>& ids, Tensor& x) { x.reserve(net_.input_capacity_wish(int64_t(ids.size()))); });
  const SampleSource& train = *data_.train;
  task_->validate(train);
  for (const auto* src : {data_.val.get(), data_.test.get()})
    if (src)
      H3D_USAGE_CHECK(src->extent() == train.extent() && src->channels() == train.channels(),
                      "the evaluation data (" << src->describe() << ") does not match the training data ("
                                              << train.describe() << ")");
  sampler_ = std::make_unique<TrainSampler>(train.size(), o_.batch_size, o_.model.seed, parse_last_batch(o_.last_batch));

  net_ = build_model_for(o_.model, train.extent(), *grid_, o_.deterministic);
  // Every flag, the data and the layout are valid: does it fit? (Nothing
  // large is allocated yet: weights only.)
  plan.base.extent = train.extent();
  const std::string too_big = run_on_root(world, [&] { check_memory(plan, o_, true); });
  if (!too_big.empty()) throw UsageError(too_big);
  // The check's copies of the network go back to the OS, and out of the
  // pool's peak (--profile reports the run's own).
  BufferPool::instance().trim();
  BufferPool::instance().reset_peak();
  H3D_USAGE_CHECK(o_.bucket_mib > 0, "--allreduce-bucket-mib must be positive (for example 8)");
  if (o_.shard_optimizer) shards_ = std::make_unique<ShardedState>(net_.params(), world.rank(), world.size());
  reducer_.plan(*grid_, net_.params_by_layer(), int64_t(o_.bucket_mib * (1 << 20)), o_.allreduce_overlap,
                omp_get_max_threads(), shards_.get());
  block_ = net_.input_shape().dist.box(grid_->spatial_rank());
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
  checkpoints_ = std::make_unique<CheckpointManager>(*grid_, o_, net_, *opt_, run_info(), shards_.get());
  start_step_ = checkpoints_->resume(total_steps_);
  metrics_.open(o_.metrics, world.rank() == 0, start_step_ > 0);
}

Trainer::~Trainer() = default;

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
  auto ids = sampler_->batch(step);
  int64_t lo, hi;
  local_range(lo, hi);
  std::vector<int64_t> mine(ids.begin() + lo, ids.begin() + hi);
  if (data_.augmented)  // the augmentation draws from (epoch, sample)
    for (auto& id : mine) id += step / steps_per_epoch_ * data_.train->size();
  return mine;
}

StepContext Trainer::step_context(int64_t step, bool training) const {
  int64_t lo, hi;
  local_range(lo, hi);
  return make_step_context(backend_.get(), grid_.get(), o_.model.seed, o_.halo_overlap, training, step, lo, hi - lo);
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
      load_batch(*data_.train, mine, input_, targets_);
    }
    last_data_wait_ = Profiler::now() - t0;
  }
  StepContext ctx = step_context(step, true);
  output_ = net_.forward(ctx, std::move(input_));
  const double loss = task_->loss(*backend_, *grid_, output_, targets_, dout_);
  if (!std::isfinite(loss) && !o_.skip_nonfinite) {
    if (prefetch_) prefetch_->wait();  // the loader is not thread-safe
    Tensor x;
    std::vector<float> t;
    load_batch(*data_.train, mine, x, t);  // the step again, for the replay
    H3D_THROW(UsageError, "the loss is " << loss << " at step " << step << "; "
                                          << where_nonfinite(net_, step_context(step, true), std::move(x),
                                                             grid_->world())
                                          << "; training stopped (lower --lr, check the input data and --transform, "
                                          << "or --skip-nonfinite)");
  }
  net_.backward(
      ctx, std::move(dout_), [this](const std::vector<Param*>& ps) { reducer_.ready(ps); },
      [this](const std::vector<Param*>& ps) { reducer_.needed(ps); });
  reducer_.finish();
  if (shards_) shards_->take_complete_gradients();
  last_skipped_ = false;
  // The loss is the same on every rank: all look at their gradients, or none.
  const std::string bad = !std::isfinite(loss) ? "(the loss)"
                          : shards_            ? shards_->first_nonfinite(*backend_, grid_->world())
                                               : first_nonfinite_gradient(net_, *backend_, grid_->world());
  if (!bad.empty()) {
    H3D_USAGE_CHECK(o_.skip_nonfinite, "the gradient of '" << bad << "' is not finite at step " << step
                                                            << " (the first such parameter in backward order); "
                                                            << "training stopped (lower --lr, or --skip-nonfinite)");
    ++skipped_steps_;
    last_skipped_ = true;
    return loss;  // no update: the weights stay those of the last good step
  }
  ProfileScope timed(prof::kOptimizer);
  if (!shards_) {
    opt_->step(*backend_, whole_params(net_.params()), o_.schedule.at(step));
    return loss;
  }
  opt_->step(*backend_, shards_->slices(), o_.schedule.at(step));
  shards_->allgather_weights(grid_->world(), std::max<int64_t>(1, int64_t(o_.bucket_mib * (1 << 20)) / 4));
  return loss;
}

ValidationResult Trainer::evaluate(SampleSource* src) {
  if (!src) return {};
  if (prefetch_) prefetch_->wait();  // HDF5 is not thread-safe
  const int64_t n = src->size(), batches = eval_batches(n, o_.batch_size);
  int64_t lo, hi;
  local_range(lo, hi);
  task_->eval_begin();
  Tensor x;
  std::vector<float> t, weights;
  std::vector<int64_t> ids;
  for (int64_t b = 0; b < batches; ++b) {
    eval_batch(n, o_.batch_size, b, ids, weights);
    load_batch(*src, std::vector<int64_t>(ids.begin() + lo, ids.begin() + hi), x, t);
    StepContext ctx = step_context(0, false);
    task_->eval_add(net_.forward(ctx, std::move(x)), t, std::vector<float>(weights.begin() + lo, weights.begin() + hi));
  }
  return task_->eval_finish(*grid_);
}

void Trainer::check_replicas_identical() { require_identical_replicas(net_, *grid_); }

void Trainer::save(const std::string& path) {
  save_network_weights(net_, *grid_, path,
                       {{"model", o_.model.model}, {"input_size", std::to_string(o_.model.input_size)}});
}

void Trainer::say(const std::string& line) const {
  if (grid_->world().rank() == 0 && !o_.quiet) std::printf("%s\n", line.c_str()), std::fflush(stdout);
}

void Trainer::report_evaluation(SampleSource* src, const char* what, const char* type, int64_t step) {
  if (!src) return;
  const ValidationResult v = evaluate(src);
  say(std::string(what) + " at step " + std::to_string(step) + ": " + task_->report(v));
  nlohmann::json rec = {{"type", type}, {"step", step}};
  rec.update(task_->record(v));
  metrics_.write(rec);
}

bool Trainer::after_step(int64_t step, double loss, double dt) {
  metrics_.write({{"type", "train"}, {"step", step}, {"epoch", step / steps_per_epoch_}, {"loss", loss},
                  {"lr", o_.schedule.at(step)}, {"step_time_s", dt}, {"samples_per_s", double(o_.batch_size) / dt},
                  {"data_wait_s", last_data_wait_}, {"skipped", last_skipped_}});
  window_s_ += dt;
  ++window_steps_;
  const int64_t done = step + 1;
  if (done % o_.log_every == 0 || done == total_steps_) {
    const double avg = window_s_ / double(window_steps_);
    char buf[256];
    std::snprintf(buf, sizeof buf, "step %lld/%lld  loss %.5f  lr %.2e  %.2f samples/s  elapsed %s  left %s",
                  (long long)done, (long long)total_steps_, loss, o_.schedule.at(step), double(o_.batch_size) / avg,
                  hms(Profiler::now() - started_).c_str(), hms(avg * double(total_steps_ - done)).c_str());
    say(buf);
    window_s_ = 0;
    window_steps_ = 0;
  }
  const int64_t val_every = o_.val_every > 0 ? o_.val_every : steps_per_epoch_;
  if (done % val_every == 0 && done != total_steps_) report_evaluation(data_.val.get(), "validation", "val", done);
  // A signal on any rank stops every rank after this step.
  if (grid_->world().allreduce_max(stop_requested() ? 1.0 : 0.0) > 0 && done < total_steps_) {
    stopped_by_signal_ = true;
    if (checkpoints_->enabled()) checkpoints_->write(done);
    say("stopped by a signal after step " + std::to_string(done) + " of " + std::to_string(total_steps_) +
        (checkpoints_->enabled() ? "; checkpoint in " + o_.checkpoint_dir + " (continue with --resume auto)"
                                 : std::string("; no --checkpoint-dir, nothing saved")));
    return true;
  }
  if (!checkpoints_->after_step(done, start_step_, total_steps_)) return false;
  say("stopped after " + std::to_string(o_.stop_after) + " steps of this job, at step " + std::to_string(done) +
      " of " + std::to_string(total_steps_) + "; checkpoint in " + o_.checkpoint_dir + " (continue with --resume auto)");
  return true;
}

void Trainer::run() {
  say("hybrid3d: " + grid_->describe() + ", backend " + backend_->name() + ", " +
      std::to_string(omp_get_max_threads()) + " thread(s) per rank");
  say("model " + o_.model.model + ": " + net_.summary());
  say("data: " + data_.train->describe() + (data_.val ? "; validation: " + data_.val->describe() : "") +
      (data_.test ? "; test: " + data_.test->describe() : ""));
  started_ = Profiler::now();
  Profiler& profiler = Profiler::instance();
  std::vector<std::string> layers;
  for (const auto& l : net_.layers()) layers.push_back(l->name());
  int64_t profiled_steps = 0;
  for (int64_t step = start_step_; step < total_steps_; ++step) {
    // The first step creates primitives and touches fresh memory: it is left
    // out of the profile unless it is the only one.
    if (!o_.profile.empty() && step == std::min<int64_t>(start_step_ + 1, total_steps_ - 1)) start_profile(layers);
    const double t0 = Profiler::now();
    const double loss = train_step(step);
    const double dt = Profiler::now() - t0;
    if (profiler.enabled()) profiler.add(prof::kStep, dt), ++profiled_steps;
    if (after_step(step, loss, dt)) return;
  }
  if (profiler.enabled()) {
    profiler.enable(false);  // validation is not profiled
    report_profile(*grid_, layers, profiled_steps, o_.profile, grid_->world().rank() == 0);
  }
  report_evaluation(data_.val.get(), "validation", "val", total_steps_);
  report_evaluation(data_.test.get(), "test", "test", total_steps_);
  if (skipped_steps_ > 0)
    say("skipped " + std::to_string(skipped_steps_) + " step(s) whose loss or gradients were not finite");
  if (data_.store) say("data store (rank 0): " + data_.store->usage());
  check_replicas_identical();
  if (!o_.save.empty()) {
    save(o_.save);
    say("saved " + o_.save);
  }
}

}  // namespace h3d
