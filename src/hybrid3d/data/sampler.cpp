#include "hybrid3d/data/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/core/rng.hpp"

namespace h3d {

namespace {

// Fisher-Yates on a counter-based stream: the same on every rank.
std::vector<int64_t> permutation(int64_t n, uint64_t seed, uint64_t stream) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = int64_t(hash_key(seed, stream, uint64_t(i)) % uint64_t(i + 1));
    std::swap(perm[size_t(i)], perm[size_t(j)]);
  }
  return perm;
}

constexpr uint64_t kEpochStream = 0x5A3F1E, kSplitStream = 0x5B17C0DE;

}  // namespace

LastBatch parse_last_batch(const std::string& s) {
  if (s == "drop") return LastBatch::kDrop;
  if (s == "pad") return LastBatch::kPad;
  H3D_THROW(UsageError, "--last-batch '" << s << "' is unknown; use drop or pad");
}

TrainSampler::TrainSampler(int64_t samples, int64_t batch, uint64_t seed, LastBatch last)
    : n_(samples), batch_(batch), seed_(seed) {
  H3D_USAGE_CHECK(n_ > 0, "the training set is empty");
  if (last == LastBatch::kDrop) {
    H3D_USAGE_CHECK(n_ >= batch_, "the training set has " << n_ << " samples, fewer than --batch-size " << batch_
                                                           << "; lower --batch-size or use --last-batch pad");
    steps_ = n_ / batch_;
  } else {
    steps_ = (n_ + batch_ - 1) / batch_;
  }
}

std::vector<int64_t> TrainSampler::batch(int64_t step) const {
  const int64_t epoch = step / steps_, pos = step % steps_;
  const std::vector<int64_t> perm = permutation(n_, seed_, kEpochStream ^ uint64_t(epoch));
  std::vector<int64_t> ids(static_cast<size_t>(batch_));
  for (int64_t i = 0; i < batch_; ++i) ids[size_t(i)] = perm[size_t((pos * batch_ + i) % n_)];
  return ids;
}

int64_t eval_batches(int64_t samples, int64_t batch) { return (samples + batch - 1) / batch; }

void eval_batch(int64_t samples, int64_t batch, int64_t b, std::vector<int64_t>& ids, std::vector<float>& weights) {
  ids.resize(size_t(batch));
  weights.resize(size_t(batch));
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t p = b * batch + i;
    ids[size_t(i)] = p % samples;
    weights[size_t(i)] = p < samples ? 1.0f : 0.0f;
  }
}

Split split_by_fraction(int64_t samples, double val_fraction, double test_fraction, uint64_t seed) {
  H3D_USAGE_CHECK(val_fraction >= 0 && val_fraction < 1 && test_fraction >= 0 && test_fraction < 1,
                  "--val-fraction and --test-fraction must be in [0, 1)");
  const int64_t nv = int64_t(std::llround(val_fraction * double(samples)));
  const int64_t nt = int64_t(std::llround(test_fraction * double(samples)));
  H3D_USAGE_CHECK(val_fraction == 0 || nv > 0,
                  "--val-fraction " << val_fraction << " of " << samples << " samples is no sample; raise it");
  H3D_USAGE_CHECK(test_fraction == 0 || nt > 0,
                  "--test-fraction " << test_fraction << " of " << samples << " samples is no sample; raise it");
  H3D_USAGE_CHECK(nv + nt < samples, "--val-fraction and --test-fraction leave no training samples of the "
                                         << samples);
  const std::vector<int64_t> perm = permutation(samples, seed, kSplitStream);
  Split s;
  s.val.assign(perm.begin(), perm.begin() + nv);
  s.test.assign(perm.begin() + nv, perm.begin() + nv + nt);
  s.train.assign(perm.begin() + nv + nt, perm.end());
  for (auto* v : {&s.train, &s.val, &s.test}) std::sort(v->begin(), v->end());
  return s;
}

SubsetSource::SubsetSource(std::shared_ptr<SampleSource> inner, std::vector<int64_t> ids, std::string what)
    : inner_(std::move(inner)), ids_(std::move(ids)), what_(std::move(what)) {}

std::string SubsetSource::describe() const { return what_; }

}  // namespace h3d
