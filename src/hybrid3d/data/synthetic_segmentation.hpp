// SyntheticSegmentation: CT-like volumes with organ and tumour labels, a
// pure function of (seed, sample index, voxel): every rank computes its own
// block without communication, and the volume is the same whatever the
// layout.
//
// Each volume (one channel, side S): an organ-like body, a deformed
// ellipsoid (random centre near the middle, radii 0.22..0.32 S, a smooth
// sinusoidal deformation of its boundary) with a smooth intensity texture,
// holding 1 to 3 tumour-like balls (radius 0.04..0.09 S, inside the organ's
// inner half) that are darker by a modest contrast (0.35..0.5 against a
// noise sigma of 0.25), on a textured background; then a random intensity
// scale (0.8..1.25) and offset (-0.1..0.1). Labels: 0 background, 1 organ,
// 2 tumour. The tumours are small and of modest contrast, so the organ is
// easy and the tumours are not.
#pragma once
#include <cstdint>
#include <string>

#include "hybrid3d/data/sample_source.hpp"

namespace h3d {

class SyntheticSegmentation : public SampleSource {
 public:
  // Samples index_offset .. index_offset + count - 1 of the stream `seed`.
  SyntheticSegmentation(int64_t side, int64_t count, uint64_t seed, int64_t index_offset = 0)
      : side_(side), count_(count), seed_(seed), offset_(index_offset) {}
  int64_t size() const override { return count_; }
  std::array<int64_t, 3> extent() const override { return {side_, side_, side_}; }
  int64_t channels() const override { return 1; }
  int64_t classes() const override { return 3; }
  void load(int64_t index, const Box& box, float* out, float* target) override;
  std::string describe() const override;

 private:
  int64_t side_, count_;
  uint64_t seed_;
  int64_t offset_;
};

}  // namespace h3d
