#include "hybrid3d/data/synthetic_universe.hpp"

#include <fftw3.h>

#include <cmath>
#include <complex>
#include <sstream>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/core/rng.hpp"

namespace h3d {

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kVoxelMpc = 4.0;  // Mpc/h per voxel
constexpr double kMeanCount = 32.0;
constexpr double kRedshifts[4] = {0.0, 0.5, 1.0, 2.0};
constexpr uint64_t kStreamParams = 0xC05A0ull, kStreamNoise = 0x4015Eull, kStreamCounts = 0xC0047ull;

double bbks(double k, double gamma) {
  double q = k / gamma;
  if (q < 1e-8) return 1.0;
  double a = std::log(1 + 2.34 * q) / (2.34 * q);
  double b = 1 + 3.89 * q + std::pow(16.1 * q, 2) + std::pow(5.46 * q, 3) + std::pow(6.71 * q, 4);
  return a * std::pow(b, -0.25);
}

struct Spectrum {
  double amp, n_s, gamma;
  double operator()(double k) const {
    double t = bbks(k, gamma);
    return amp * std::pow(k, n_s) * t * t;
  }
};

// sigma_8 normalisation: sigma^2(R) = 1/(2 pi^2) int k^2 P(k) W(kR)^2 dk, top-hat W.
Spectrum normalised_spectrum(const CosmoParams& p) {
  Spectrum s{1.0, p.n_s, p.omega_m * p.h};
  const double R = 8.0, lo = std::log(1e-4), hi = std::log(1e2);
  const int steps = 4000;
  double sum = 0;
  for (int i = 0; i <= steps; ++i) {
    double lk = lo + (hi - lo) * i / steps, k = std::exp(lk), x = k * R;
    double w = 3 * (std::sin(x) - x * std::cos(x)) / (x * x * x);
    double f = k * k * k * s(k) * w * w;  // dk = k dlnk
    sum += (i == 0 || i == steps ? 0.5 : 1.0) * f;
  }
  double sigma2 = sum * (hi - lo) / steps / (2 * kPi * kPi);
  s.amp = p.sigma_8 * p.sigma_8 / sigma2;
  return s;
}

// Linear growth D(z)/D(0) in flat LambdaCDM (Carroll, Press & Turner 1992).
double growth(double z, double omega_m) {
  auto g = [&](double zz) {
    double a3 = std::pow(1 + zz, 3), e2 = omega_m * a3 + (1 - omega_m);
    double om = omega_m * a3 / e2, ol = (1 - omega_m) / e2;
    return 2.5 * om / (std::pow(om, 4.0 / 7.0) - ol + (1 + om / 2) * (1 + ol / 70));
  };
  return g(z) / (1 + z) / g(0);
}

}  // namespace

CosmoParams CosmoParams::from_unit(const float u[4]) {
  return {0.30 + 0.15 * u[0], 0.80 + 0.15 * u[1], 0.96 + 0.16 * u[2], (70.0 + 15.0 * u[3]) / 100.0};
}

void universe_unit_par(uint64_t seed, int64_t index, float u[4]) {
  for (int j = 0; j < 4; ++j)
    u[j] = float(2.0 * uniform01(seed, kStreamParams, uint64_t(index) * 4 + uint64_t(j)) - 1.0);
}

std::vector<int16_t> generate_universe(int64_t n, uint64_t seed, int64_t index, float u[4]) {
  H3D_CHECK(n >= 2 && n <= 1024, "synthetic universe side " << n << " out of range");
  universe_unit_par(seed, index, u);
  CosmoParams p = CosmoParams::from_unit(u);
  Spectrum P = normalised_spectrum(p);
  const int64_t cells = n * n * n, nk = n / 2 + 1;
  float* field = fftwf_alloc_real(size_t(cells));
  fftwf_complex* modes = fftwf_alloc_complex(size_t(n * n * nk));
  H3D_CHECK(field && modes, "out of memory generating a " << n << "^3 universe");
  fftwf_plan fwd = fftwf_plan_dft_r2c_3d(int(n), int(n), int(n), field, modes, FFTW_ESTIMATE);
  fftwf_plan inv = fftwf_plan_dft_c2r_3d(int(n), int(n), int(n), modes, field, FFTW_ESTIMATE);

  uint64_t noise_stream = kStreamNoise ^ (uint64_t(index) << 20);
  for (int64_t i = 0; i < cells; ++i) field[i] = float(normal01(seed, noise_stream, uint64_t(i)));
  fftwf_execute(fwd);
  // White noise with unit variance per cell has <|W_k|^2> = cells; the DFT of
  // a field with power P has <|d_k|^2> = cells * P(k) / dV.
  const double dk = 2 * kPi / (double(n) * kVoxelMpc), dv = std::pow(kVoxelMpc, 3);
  for (int64_t a = 0; a < n; ++a)
    for (int64_t b = 0; b < n; ++b)
      for (int64_t c = 0; c < nk; ++c) {
        double ka = double(a <= n / 2 ? a : a - n), kb = double(b <= n / 2 ? b : b - n), kc = double(c);
        double k = dk * std::sqrt(ka * ka + kb * kb + kc * kc);
        double amp = k > 0 ? std::sqrt(P(k) / dv) / double(cells) : 0.0;  // 1/cells: FFTW's inverse is unnormalised
        auto& m = modes[(a * n + b) * nk + c];
        m[0] = float(m[0] * amp);
        m[1] = float(m[1] * amp);
      }
  fftwf_execute(inv);
  double var = 0;
  for (int64_t i = 0; i < cells; ++i) var += double(field[i]) * field[i];
  var /= double(cells);

  std::vector<int16_t> out(size_t(cells * 4));
  for (int ch = 0; ch < 4; ++ch) {
    double d = growth(kRedshifts[ch], p.omega_m), s2 = d * d * var;
    uint64_t stream = kStreamCounts ^ (uint64_t(index) << 20) ^ (uint64_t(ch) << 8);
    for (int64_t i = 0; i < cells; ++i) {
      double rho = std::exp(d * field[i] - 0.5 * s2);
      out[size_t(i * 4 + ch)] = int16_t(std::min<int64_t>(32767, poisson(kMeanCount * rho, seed, stream, uint64_t(i))));
    }
  }
  fftwf_destroy_plan(fwd);
  fftwf_destroy_plan(inv);
  fftwf_free(field);
  fftwf_free(modes);
  return out;
}

SyntheticUniverses::SyntheticUniverses(int64_t side, int64_t count, uint64_t seed, int64_t offset, InputTransform t)
    : side_(side), count_(count), seed_(seed), offset_(offset), transform_(t) {
  H3D_USAGE_CHECK(count >= 1, "synthetic data needs at least one sample (got " << count << ")");
}

void SyntheticUniverses::load(int64_t index, const Box& box, float* out, float* target) {
  H3D_CHECK(index >= 0 && index < count_, "sample index " << index << " out of range");
  if (!(box == cached_box_)) {
    cache_.clear();
    cached_box_ = box;
  }
  int64_t gid = offset_ + index;
  universe_unit_par(seed_, gid, target);
  auto it = cache_.find(index);
  if (it == cache_.end()) {
    float u[4];
    std::vector<int16_t> full = generate_universe(side_, seed_, gid, u);
    std::vector<int16_t> block(size_t(4 * box.volume()));
    size_t k = 0;
    for (int ch = 0; ch < 4; ++ch)
      for (int64_t z = box.r[0].lo; z < box.r[0].hi; ++z)
        for (int64_t y = box.r[1].lo; y < box.r[1].hi; ++y)
          for (int64_t x = box.r[2].lo; x < box.r[2].hi; ++x)
            block[k++] = full[size_t(((z * side_ + y) * side_ + x) * 4 + ch)];
    it = cache_.emplace(index, std::move(block)).first;
  }
  const auto& b = it->second;
  transform_counts(transform_, b.data(), out, int64_t(b.size()));
}

std::string SyntheticUniverses::describe() const {
  std::ostringstream os;
  os << count_ << " synthetic universes of " << side_ << "^3 x 4 (seed " << seed_ << ", first index " << offset_ << ")";
  return os.str();
}

}  // namespace h3d
