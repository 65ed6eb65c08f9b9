// The datasets of a training run, opened from its flags: staging to a
// node-local copy (--stage-dir), one cache budget for all sets
// (--data-store-mib), held-out shares (--val-fraction, --test-fraction) or
// sets of their own (--val-data, --test-data), and for segmentation the
// crops and flips (data/augment.hpp). Each set's reader comes from
// data/open_data.hpp, as predict's does.
#pragma once
#include <memory>

#include "hybrid3d/data/data_store.hpp"
#include "hybrid3d/data/open_data.hpp"
#include "hybrid3d/data/sample_source.hpp"
#include "hybrid3d/parallel/comm.hpp"
#include "hybrid3d/train/train_options.hpp"

namespace h3d {

struct TrainingData {
  std::shared_ptr<SampleSource> train, val, test;  // val, test: null if none
  const DataStore* store = nullptr;                // the training set's cache, if any
  bool augmented = false;  // training ids carry the epoch (AugmentedSource)
};

// Collective over `world` (staging, the budget) and `group` (the readers).
// With --stage-dir, o.data, o.val_data and o.test_data become the copies.
// UsageError unless the training samples fit the model's input.
TrainingData open_training_data(const Comm& world, const Comm& group, TrainOptions& o);

}  // namespace h3d
