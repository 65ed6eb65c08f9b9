// AugmentedSource: random crops and flips of a segmentation source, the
// same whatever the layout.
//
// A sample is drawn as a window of the model's side S out of the (possibly
// larger) volume, at a random origin (--random-crop) or at the centre, and
// mirrored along each axis with probability 1/2 (--flip). Both are pure
// functions of (seed, epoch, sample), so every rank of a group sees the
// same draw and reads its own block of the transformed window: a mirrored
// block is read from the mirrored box of the file and reversed in memory.
// Labels move with the image.
//
// The ids passed to load() carry the epoch: id = epoch * size() + sample
// (the Trainer's training loads); an id below size() is epoch 0. Without
// random draws (validation) the window is the centre crop.
#pragma once
#include <memory>

#include "hybrid3d/data/sample_source.hpp"

namespace h3d {

class AugmentedSource : public SampleSource {
 public:
  AugmentedSource(std::shared_ptr<SampleSource> inner, int64_t side, uint64_t seed, bool random_crop, bool flip);
  int64_t size() const override { return inner_->size(); }
  std::array<int64_t, 3> extent() const override { return {side_, side_, side_}; }
  int64_t channels() const override { return inner_->channels(); }
  int64_t classes() const override { return inner_->classes(); }
  void load(int64_t index, const Box& box, float* out, float* target) override;
  std::string describe() const override;
  bool random() const { return crop_ || flip_; }

 private:
  std::shared_ptr<SampleSource> inner_;
  int64_t side_;
  uint64_t seed_;
  bool crop_, flip_;
  std::vector<float> scratch_;
};

}  // namespace h3d
