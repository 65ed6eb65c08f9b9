#include "hybrid3d/train/train_data.hpp"

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/data/augment.hpp"
#include "hybrid3d/data/cache_budget.hpp"
#include "hybrid3d/data/sampler.hpp"
#include "hybrid3d/data/stage.hpp"
#include "hybrid3d/models/registry.hpp"

namespace h3d {

namespace {

constexpr int64_t kValIndexOffset = int64_t(1) << 40;  // synthetic evaluation ids never meet training ids

// One set, behind the run's cache when there is one (null budget: none).
// Synthetic segmentation cases are cheap to make: they are made anew each time.
std::shared_ptr<SampleSource> open_set(const Comm& group, const std::string& spec, const DataRequest& r,
                                       const char* flag, int64_t count, int64_t offset,
                                       const std::shared_ptr<CacheBudget>& budget, const DataStore** store = nullptr) {
  std::unique_ptr<SampleSource> source = open_dataset(group, spec, r, flag, count, offset);
  if (!budget || (spec == "synthetic" && r.segmentation)) return source;
  auto kept = std::make_shared<DataStore>(std::move(source), budget);
  if (store) *store = kept.get();
  return kept;
}

// What a model of `m` asks of its data.
DataRequest data_request(const ModelOptions& m, const std::string& transform, const std::string& read_mode,
                         const std::string& intensity_window) {
  DataRequest r;
  r.segmentation = is_segmentation(m);
  r.side = m.input_size;
  r.classes = m.classes;
  r.seed = m.seed;
  r.transform = transform;
  r.read_mode = read_mode;
  r.intensity_window = intensity_window;
  return r;
}

}  // namespace

TrainingData open_training_data(const Comm& world, const Comm& group, TrainOptions& o) {
  const bool split = o.val_fraction > 0 || o.test_fraction > 0;
  if (!o.stage_dir.empty()) {
    auto stage = [&](std::string& spec, const char* name) {
      if (!spec.empty() && spec != "synthetic") spec = stage_dataset(world, spec, o.stage_dir, name, o.quiet);
    };
    stage(o.data, "train");
    stage(o.val_data, "val");
    stage(o.test_data, "test");
  }
  H3D_USAGE_CHECK(!(o.val_fraction > 0 && !o.val_data.empty()), "give --val-data or --val-fraction, not both");
  H3D_USAGE_CHECK(!(o.test_fraction > 0 && !o.test_data.empty()), "give --test-data or --test-fraction, not both");
  // One budget for every sample cache of the run, the same on every rank
  // (the synthetic generator and collective readers need the same decisions
  // on the ranks of a group).
  std::shared_ptr<CacheBudget> budget;
  if (o.data_store_mib != 0) {
    const double limit = o.data_store_mib > 0 ? o.data_store_mib * double(1 << 20)
                                              : double(default_cache_bytes(ranks_on_this_node(world)));
    budget = std::make_shared<CacheBudget>(int64_t(-world.allreduce_max(-limit)));
  }
  const DataRequest req = data_request(o.model, o.transform, o.read_mode, o.intensity_window);
  TrainingData d;
  std::shared_ptr<SampleSource> all = open_set(group, o.data, req, "--data", o.train_samples, 0, budget, &d.store);
  if (split) {
    const Split parts = split_by_fraction(all->size(), o.val_fraction, o.test_fraction, o.model.seed);
    auto held_out = [](const std::vector<int64_t>& ids, const char* flag) {
      return std::to_string(ids.size()) + " samples held out by " + flag;
    };
    d.train = std::make_shared<SubsetSource>(
        all, parts.train, std::to_string(parts.train.size()) + " training samples of " + all->describe());
    if (!parts.val.empty()) d.val = std::make_shared<SubsetSource>(all, parts.val, held_out(parts.val, "--val-fraction"));
    if (!parts.test.empty())
      d.test = std::make_shared<SubsetSource>(all, parts.test, held_out(parts.test, "--test-fraction"));
  } else {
    d.train = all;
  }
  // Synthetic evaluation sets draw from id ranges of their own, so they never meet the training ids.
  if (!o.val_data.empty())
    d.val = open_set(group, o.val_data, req, "--val-data", o.val_samples,
                     o.val_data == "synthetic" ? kValIndexOffset : 0, budget);
  else if (!split && o.data == "synthetic" && o.val_samples > 0)
    d.val = open_set(group, "synthetic", req, "--val-data", o.val_samples, kValIndexOffset, budget);
  if (!o.test_data.empty())
    d.test = open_set(group, o.test_data, req, "--test-data", o.val_samples,
                      o.test_data == "synthetic" ? 2 * kValIndexOffset : 0, budget);
  // Segmentation volumes larger than the model's input are cropped (at random
  // for training with --random-crop, at the centre otherwise), and flipped.
  H3D_USAGE_CHECK(!(o.random_crop || o.flip) || req.segmentation,
                  "--random-crop and --flip are for segmentation models (--model unet3d)");
  if (req.segmentation) {
    const int64_t S = o.model.input_size;
    const std::array<int64_t, 3> cube{S, S, S};
    if (o.random_crop || o.flip || d.train->extent() != cube) {
      d.train = std::make_shared<AugmentedSource>(d.train, S, o.model.seed, o.random_crop, o.flip);
      d.augmented = true;
    }
    for (auto* src : {&d.val, &d.test})
      if (*src && (*src)->extent() != cube) *src = std::make_shared<AugmentedSource>(*src, S, o.model.seed, false, false);
  }
  require_model_input(*d.train, req, model_in_channels(o.model));
  return d;
}

}  // namespace h3d
