#include "hybrid3d/train/checkpoint_manager.hpp"

#include <cstdio>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/parallel/output_dir.hpp"
#include "hybrid3d/train/checkpoint.hpp"
#include "hybrid3d/train/network_weights.hpp"

namespace h3d {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

CheckpointManager::CheckpointManager(const ProcessGrid& grid, const TrainOptions& o, Network& net, Optimizer& opt,
                                     nlohmann::json run_info, const ShardedState* shards)
    : grid_(grid), world_(grid.world()), o_(o), net_(net), opt_(opt), shards_(shards), run_info_(std::move(run_info)) {
  H3D_USAGE_CHECK(o.checkpoint_every >= 0 && o.checkpoint_minutes >= 0 && o.stop_after >= 0 && o.keep >= 1,
                  "--checkpoint-every, --checkpoint-minutes and --stop-after must not be negative, --keep at least 1");
  H3D_USAGE_CHECK(!o.checkpoint_dir.empty() || (o.checkpoint_every == 0 && o.checkpoint_minutes == 0 &&
                                                 o.stop_after == 0 && o.resume != "auto"),
                  "--checkpoint-every, --checkpoint-minutes, --stop-after and --resume auto need --checkpoint-dir");
  if (!enabled()) return;
  create_output_dir(world_, o.checkpoint_dir, "--checkpoint-dir");
  // A directory too small for even one checkpoint is refused now; one too
  // small for --keep of them is only warned about (older ones may go).
  // Only rank 0 writes checkpoints, so only its view of the disk counts.
  const std::string refusal = run_on_root(world_, [&] {
    const std::string warning = check_checkpoint_space(o.checkpoint_dir, checkpoint_bytes(net, opt.slots()), o.keep);
    if (!warning.empty()) std::fprintf(stderr, "hybrid3d: warning: %s\n", warning.c_str());
  });
  if (!refusal.empty()) throw UsageError(refusal);
}

int64_t CheckpointManager::resume(int64_t total_steps) {
  if (o_.resume.empty()) return 0;
  const bool autom = o_.resume == "auto";
  const std::string spec = autom ? o_.checkpoint_dir : o_.resume;
  // Rank 0 finds and verifies; every rank then loads the same checkpoint.
  std::string path, warnings;
  const std::string failure = run_on_root(world_, [&] {
    const FoundCheckpoint f = find_checkpoint(spec);
    path = f.path;
    warnings = f.warnings;
  });
  if (!failure.empty()) throw UsageError(failure);
  broadcast_string(world_, path);
  broadcast_string(world_, warnings);
  if (world_.rank() == 0 && !warnings.empty()) std::fprintf(stderr, "hybrid3d: warning: %s", warnings.c_str()), std::fflush(stderr);
  if (path.empty()) {
    H3D_USAGE_CHECK(autom, "--resume '" << spec << "': no usable checkpoint there" << (warnings.empty() ? "" : " (see above)"));
    if (world_.rank() == 0 && !o_.quiet) std::printf("resume: no checkpoint in '%s' yet; starting afresh\n", spec.c_str());
    return 0;
  }
  const LoadedCheckpoint c = load_checkpoint_everywhere(world_, path, net_, opt_,
                                                        shards_ ? shards_->slices() : whole_params(net_.params()));
  for (const char* key : {"model", "optimizer", "seed", "batch_size"})
    H3D_USAGE_CHECK(c.run.contains(key) && c.run[key] == run_info_[key],
                    "--resume: checkpoint '" << path << "' was written with " << key << " "
                                             << (c.run.contains(key) ? c.run[key].dump() : "?") << ", this run has "
                                             << run_info_[key].dump() << "; use the same, or start afresh");
  H3D_USAGE_CHECK(c.step <= total_steps, "--resume: checkpoint '" << path << "' is at step " << c.step
                                                                  << ", past this run's " << total_steps << " steps");
  last_step_ = c.step;
  if (world_.rank() == 0 && !o_.quiet)
    std::printf("resume: %s at step %lld (written under %s)\n", path.c_str(), (long long)c.step,
                c.run.contains("layout") && c.run["layout"].is_string() ? c.run["layout"].get<std::string>().c_str()
                                                                         : "?");
  return c.step;
}

bool CheckpointManager::after_step(int64_t steps_done, int64_t start_step, int64_t total) {
  if (!enabled()) return false;
  int due = (o_.checkpoint_every > 0 && steps_done % o_.checkpoint_every == 0) ||
            (o_.checkpoint_minutes > 0 && seconds_since(last_time_) >= 60 * o_.checkpoint_minutes);
  world_.bcast(&due, sizeof due, 0);  // rank 0's clock decides
  const bool stop = o_.stop_after > 0 && steps_done - start_step == o_.stop_after && steps_done < total;
  if (due || stop || steps_done == total) write(steps_done);
  return stop;
}

void CheckpointManager::write(int64_t steps_done) {
  const auto t0 = std::chrono::steady_clock::now();
  // Rank 0 writes; every rank learns the outcome, so a failure (a full disk)
  // stops the whole job alike, with one message, instead of an abort.
  const OptimizerState state = whole_optimizer_state(grid_, opt_, net_.params(), shards_);
  std::vector<Tensor> wholes;
  const std::vector<NamedTensor> model = whole_model_tensors(net_, grid_, wholes);
  const std::string failure =
      run_on_root(world_, [&] { write_checkpoint(o_.checkpoint_dir, steps_done, model, state, run_info_, o_.keep); });
  if (!failure.empty()) {
    H3D_THROW(CheckpointError, "the checkpoint at step " << steps_done << " could not be written (" << failure
                                   << "); training stopped. "
                                   << (last_step_ > 0 ? "The checkpoint of step " + std::to_string(last_step_) +
                                                            " in '" + o_.checkpoint_dir + "' is intact"
                                                      : std::string("No earlier checkpoint exists"))
                                   << ": free space there (or give another --checkpoint-dir) and resubmit with "
                                      "--resume auto");
  }
  last_step_ = steps_done;
  last_time_ = std::chrono::steady_clock::now();
  if (world_.rank() == 0 && !o_.quiet) {
    int64_t floats = 0;
    for (auto* p : net_.params()) floats += p->whole_numel();
    std::printf("checkpoint at step %lld in %.2f s (%.0f MiB of weights, plus optimizer state)\n",
                (long long)steps_done, seconds_since(t0), double(floats) * 4 / (1 << 20));
    std::fflush(stdout);
  }
}

}  // namespace h3d
