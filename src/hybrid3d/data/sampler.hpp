// The sampler: which samples make each mini-batch, the same on every rank
// and for every layout (it depends on the seed, the epoch and the set's
// size only).
//
//  - Training: a global shuffle per epoch from (seed, epoch). A partial last
//    mini-batch (set size not a multiple of the batch) is dropped, or padded
//    with the first samples of the same epoch's order (PyTorch's
//    DistributedSampler pads the same way), by --last-batch.
//  - Evaluation (validation, test): every sample exactly once, in order; the
//    last mini-batch is filled up with repeats that carry weight 0, so every
//    data group has samples to compute and none waits for the others.
//  - Splits by fraction: a fixed shuffle of the set (from the seed, not the
//    epoch) gives the validation and test shares; the rest is training.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hybrid3d/data/sample_source.hpp"

namespace h3d {

enum class LastBatch { kDrop, kPad };
LastBatch parse_last_batch(const std::string& s);

class TrainSampler {
 public:
  TrainSampler(int64_t samples, int64_t batch, uint64_t seed, LastBatch last);
  int64_t steps_per_epoch() const { return steps_; }
  // The global mini-batch of training step `step` (epochs follow each other).
  std::vector<int64_t> batch(int64_t step) const;

 private:
  int64_t n_, batch_, steps_;
  uint64_t seed_;
};

// Mini-batch `b` of an evaluation pass over `samples`: ids and weights (1 for
// a real sample, 0 for padding).
int64_t eval_batches(int64_t samples, int64_t batch);
void eval_batch(int64_t samples, int64_t batch, int64_t b, std::vector<int64_t>& ids, std::vector<float>& weights);

struct Split {
  std::vector<int64_t> train, val, test;  // ids of the whole set, ascending
};
// Throws UsageError when a share would be empty or the fractions leave no training data.
Split split_by_fraction(int64_t samples, double val_fraction, double test_fraction, uint64_t seed);

// A view of some samples of a shared source, renumbered 0..n-1; `what`
// is its description.
class SubsetSource : public SampleSource {
 public:
  SubsetSource(std::shared_ptr<SampleSource> inner, std::vector<int64_t> ids, std::string what);
  int64_t size() const override { return int64_t(ids_.size()); }
  std::array<int64_t, 3> extent() const override { return inner_->extent(); }
  int64_t channels() const override { return inner_->channels(); }
  int64_t classes() const override { return inner_->classes(); }
  void load(int64_t index, const Box& box, float* out, float* target) override {
    inner_->load(ids_.at(size_t(index)), box, out, target);
  }
  std::string describe() const override;
  int64_t group_max(int64_t v) const override { return inner_->group_max(v); }

 private:
  std::shared_ptr<SampleSource> inner_;
  std::vector<int64_t> ids_;
  std::string what_;
};

}  // namespace h3d
