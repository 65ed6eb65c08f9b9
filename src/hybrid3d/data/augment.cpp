#include "hybrid3d/data/augment.hpp"

#include <algorithm>
#include <sstream>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/core/rng.hpp"

namespace h3d {

namespace {

// Reverses a [c, e0, e1, e2] block along dimension d in place.
void reverse_along(float* v, int64_t c, const std::array<int64_t, 3>& e, int d) {
  for (int64_t ch = 0; ch < c; ++ch) {
    float* b = v + ch * e[0] * e[1] * e[2];
    for (int64_t z = 0; z < e[0]; ++z)
      for (int64_t y = 0; y < e[1]; ++y)
        for (int64_t x = 0; x < e[2]; ++x) {
          const int64_t i[3] = {z, y, x};
          if (i[d] >= e[size_t(d)] - 1 - i[d]) continue;  // each pair once
          int64_t j[3] = {z, y, x};
          j[d] = e[size_t(d)] - 1 - i[d];
          std::swap(b[(z * e[1] + y) * e[2] + x], b[(j[0] * e[1] + j[1]) * e[2] + j[2]]);
        }
  }
}

}  // namespace

AugmentedSource::AugmentedSource(std::shared_ptr<SampleSource> inner, int64_t side, uint64_t seed, bool random_crop,
                                 bool flip)
    : inner_(std::move(inner)), side_(side), seed_(seed), crop_(random_crop), flip_(flip) {
  const auto e = inner_->extent();
  for (int d = 0; d < 3; ++d)
    H3D_USAGE_CHECK(e[size_t(d)] >= side_, "the data (" << inner_->describe() << ") is smaller than --input-size "
                                                         << side_ << " along dimension " << d
                                                         << "; use a smaller --input-size");
  H3D_USAGE_CHECK(inner_->classes() > 0, "--random-crop and --flip are for segmentation data");
}

void AugmentedSource::load(int64_t index, const Box& box, float* out, float* target) {
  const int64_t n = inner_->size(), epoch = index / n, sample = index % n;
  const auto E = inner_->extent();
  const uint64_t draw = uint64_t(epoch) * uint64_t(n) + uint64_t(sample);
  Box src = box;
  std::array<bool, 3> mirrored{};
  for (int d = 0; d < 3; ++d) {
    const int64_t room = E[size_t(d)] - side_;
    const int64_t origin = crop_ ? int64_t(uniform01(seed_ ^ 0xC809ull, draw, uint64_t(d)) * double(room + 1))
                                 : room / 2;
    mirrored[size_t(d)] = flip_ && uniform01(seed_ ^ 0xF11Bull, draw, uint64_t(d)) < 0.5;
    Range r = box.r[size_t(d)];
    if (mirrored[size_t(d)]) r = Range{side_ - r.hi, side_ - r.lo};
    src.r[size_t(d)] = Range{r.lo + std::min(origin, room), r.hi + std::min(origin, room)};
  }
  inner_->load(sample, src, out, target);
  const auto e = box.extents();
  for (int d = 0; d < 3; ++d)
    if (mirrored[size_t(d)]) {
      reverse_along(out, channels(), e, d);
      reverse_along(target, 1, e, d);
    }
}

std::string AugmentedSource::describe() const {
  std::ostringstream os;
  os << inner_->describe() << "; " << (crop_ ? "random " : "centre ") << side_ << "^3 crops" << (flip_ ? ", random flips" : "");
  return os.str();
}

}  // namespace h3d
