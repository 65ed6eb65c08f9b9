#include "hybrid3d/data/synthetic_segmentation.hpp"

#include <cmath>
#include <sstream>

#include "hybrid3d/core/rng.hpp"

namespace h3d {

namespace {

constexpr double kTwoPi = 6.283185307179586;

// The random shape of one volume, drawn from (seed, sample).
struct Scene {
  double c[3], r[3];                 // organ centre and radii (voxels)
  double deform_k[3], deform_phase;  // boundary deformation
  double tex_k[2][3], tex_phase[2];  // intensity texture
  int tumours;
  double t_c[3][3], t_r[3];
  double contrast, scale, offset;

  Scene(uint64_t seed, uint64_t sample, double S) {
    int k = 0;
    auto u = [&] { return uniform01(seed ^ 0x5E65E6ull, sample, uint64_t(k++)); };
    for (int d = 0; d < 3; ++d) c[d] = S * (0.5 + 0.08 * (2 * u() - 1));
    for (int d = 0; d < 3; ++d) r[d] = S * (0.22 + 0.10 * u());
    for (int d = 0; d < 3; ++d) deform_k[d] = (2 * u() - 1) * 2.0;
    deform_phase = kTwoPi * u();
    for (int t = 0; t < 2; ++t) {
      for (int d = 0; d < 3; ++d) tex_k[t][d] = (2 * u() - 1) * 3.0;
      tex_phase[t] = kTwoPi * u();
    }
    tumours = 1 + int(3 * u());
    if (tumours > 3) tumours = 3;
    for (int t = 0; t < 3; ++t) {
      for (int d = 0; d < 3; ++d) t_c[t][d] = c[d] + 0.5 * r[d] * (2 * u() - 1);
      t_r[t] = S * (0.04 + 0.05 * u());
    }
    contrast = 0.35 + 0.15 * u();
    scale = 0.8 + 0.45 * u();
    offset = 0.1 * (2 * u() - 1);
  }
};

}  // namespace

void SyntheticSegmentation::load(int64_t index, const Box& box, float* out, float* target) {
  const uint64_t sample = uint64_t(offset_ + index);
  const double S = double(side_);
  const Scene sc(seed_, sample, S);
  const auto e = box.extents();
#pragma omp parallel for schedule(static)
  for (int64_t z = 0; z < e[0]; ++z)
    for (int64_t y = 0; y < e[1]; ++y)
      for (int64_t x = 0; x < e[2]; ++x) {
        const double p[3] = {double(z + box.r[0].lo) + 0.5, double(y + box.r[1].lo) + 0.5,
                             double(x + box.r[2].lo) + 0.5};
        double f = 0, kq = 0, t0 = 0, t1 = 0;
        for (int d = 0; d < 3; ++d) {
          const double q = (p[d] - sc.c[d]) / sc.r[d];
          f += q * q;
          kq += sc.deform_k[d] * p[d] / S;
          t0 += sc.tex_k[0][d] * p[d] / S;
          t1 += sc.tex_k[1][d] * p[d] / S;
        }
        f *= 1.0 + 0.18 * std::sin(kTwoPi * kq + sc.deform_phase);
        const double texture = std::sin(kTwoPi * t0 + sc.tex_phase[0]) * std::sin(kTwoPi * t1 + sc.tex_phase[1]);
        int label = f < 1.0 ? 1 : 0;
        for (int t = 0; t < sc.tumours && label == 1; ++t) {
          double d2 = 0;
          for (int d = 0; d < 3; ++d) d2 += (p[d] - sc.t_c[t][d]) * (p[d] - sc.t_c[t][d]);
          if (d2 < sc.t_r[t] * sc.t_r[t]) label = 2;
        }
        double v = label == 0 ? 0.15 * texture : 1.0 + 0.12 * texture - (label == 2 ? sc.contrast : 0.0);
        const uint64_t voxel =
            uint64_t(((z + box.r[0].lo) * side_ + (y + box.r[1].lo)) * side_ + (x + box.r[2].lo));
        v += 0.25 * normal01(seed_ ^ 0x7015Eull, sample, voxel);
        const int64_t i = (z * e[1] + y) * e[2] + x;
        out[i] = float(sc.scale * v + sc.offset);
        target[i] = float(label);
      }
}

std::string SyntheticSegmentation::describe() const {
  std::ostringstream os;
  os << count_ << " synthetic segmentation volumes of " << side_ << "^3 (organ and tumour labels)";
  return os.str();
}

}  // namespace h3d
