#include "hybrid3d/data/synthetic_universe.hpp"

#include <fftw3-mpi.h>

#include <cmath>
#include <complex>
#include <limits>
#include <sstream>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/core/rng.hpp"
#include "hybrid3d/parallel/comm.hpp"

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

namespace {

void init_fftw_mpi() {
  static const bool done = [] {
    fftw_mpi_init();
    return true;
  }();
  (void)done;
}

// The counts of the slab rows [z0, z0 + nz) (all of H and W) go to the ranks
// whose boxes they meet; every rank receives its own box. Channels first.
std::vector<int16_t> slabs_to_blocks(const Comm& group, int64_t n, const std::vector<int16_t>& slab, int64_t z0,
                                     int64_t nz, const Box& box) {
  const int P = group.size();
  int64_t mine[8] = {box.r[0].lo, box.r[0].hi, box.r[1].lo, box.r[1].hi, box.r[2].lo, box.r[2].hi, z0, nz};
  std::vector<int64_t> all(size_t(8 * P));
  group.allgather(mine, 8, all.data());
  auto box_of = [&](int q) {
    const int64_t* v = &all[size_t(8 * q)];
    return Box{{Range{v[0], v[1]}, Range{v[2], v[3]}, Range{v[4], v[5]}}};
  };
  auto slab_of = [&](int q) {
    const int64_t* v = &all[size_t(8 * q)];
    return Box{{Range{v[6], v[6] + v[7]}, Range{0, n}, Range{0, n}}};
  };
  const Box my_slab = slab_of(group.rank());
  const size_t np = static_cast<size_t>(P);
  std::vector<int> scount(np), sdispl(np), rcount(np), rdispl(np);
  std::vector<int16_t> sendbuf;
  for (int q = 0; q < P; ++q) {
    Box part = my_slab.intersect(box_of(q));
    sdispl[size_t(q)] = mpi_count(int64_t(sendbuf.size()));
    if (!part.empty())
      for (int ch = 0; ch < 4; ++ch)
        for (int64_t z = part.r[0].lo; z < part.r[0].hi; ++z)
          for (int64_t y = part.r[1].lo; y < part.r[1].hi; ++y) {
            const int16_t* row = &slab[size_t(((ch * nz + (z - z0)) * n + y) * n)];
            sendbuf.insert(sendbuf.end(), row + part.r[2].lo, row + part.r[2].hi);
          }
    scount[size_t(q)] = mpi_count(int64_t(sendbuf.size()) - sdispl[size_t(q)]);
  }
  int64_t total = 0;
  for (int q = 0; q < P; ++q) {
    Box part = slab_of(q).intersect(box);
    rdispl[size_t(q)] = mpi_count(total);
    rcount[size_t(q)] = mpi_count(part.empty() ? 0 : 4 * part.volume());
    total += rcount[size_t(q)];
  }
  std::vector<int16_t> recvbuf(static_cast<size_t>(total));
  group.alltoallv(sendbuf.data(), scount, sdispl, recvbuf.data(), rcount, rdispl);
  auto e = box.extents();
  std::vector<int16_t> out(size_t(4 * box.volume()));
  for (int q = 0; q < P; ++q) {
    Box part = slab_of(q).intersect(box);
    if (part.empty()) continue;
    const int16_t* p = recvbuf.data() + rdispl[size_t(q)];
    for (int ch = 0; ch < 4; ++ch)
      for (int64_t z = part.r[0].lo; z < part.r[0].hi; ++z)
        for (int64_t y = part.r[1].lo; y < part.r[1].hi; ++y) {
          int16_t* dst = &out[size_t(((ch * e[0] + (z - box.r[0].lo)) * e[1] + (y - box.r[1].lo)) * e[2] +
                                     (part.r[2].lo - box.r[2].lo))];
          std::copy(p, p + part.r[2].size(), dst);
          p += part.r[2].size();
        }
  }
  return out;
}

}  // namespace

std::vector<int16_t> generate_universe_block(const Comm& group, int64_t n, uint64_t seed, int64_t index,
                                             const Box& box, float u[4]) {
  H3D_CHECK(n >= 2 && n <= 1024, "synthetic universe side " << n << " out of range");
  init_fftw_mpi();
  universe_unit_par(seed, index, u);
  CosmoParams p = CosmoParams::from_unit(u);
  Spectrum P = normalised_spectrum(p);
  const ptrdiff_t N = ptrdiff_t(n), nk = N / 2 + 1;
  const double cells = double(n) * double(n) * double(n);
  ptrdiff_t n0, z0, n1, y0;
  ptrdiff_t alloc = fftw_mpi_local_size_3d_transposed(N, N, nk, group.raw(), &n0, &z0, &n1, &y0);
  // In place: the real slab [n0][N][2 nk] (padded rows) shares the buffer
  // with the transposed complex slab [n1][N][nk].
  double* field = fftw_alloc_real(size_t(2 * std::max<ptrdiff_t>(alloc, 1)));
  H3D_CHECK(field, "out of memory generating a " << n << "^3 universe");
  auto* modes = reinterpret_cast<fftw_complex*>(field);
  fftw_plan fwd = fftw_mpi_plan_dft_r2c_3d(N, N, N, field, modes, group.raw(), FFTW_ESTIMATE | FFTW_MPI_TRANSPOSED_OUT);
  fftw_plan inv = fftw_mpi_plan_dft_c2r_3d(N, N, N, modes, field, group.raw(), FFTW_ESTIMATE | FFTW_MPI_TRANSPOSED_IN);
  H3D_CHECK(fwd && inv, "FFTW could not plan a distributed " << n << "^3 transform");

  // White noise keyed by the global cell index: the same field whatever the layout.
  const uint64_t noise_stream = kStreamNoise ^ (uint64_t(index) << 20);
  for (ptrdiff_t a = 0; a < n0; ++a)
    for (ptrdiff_t b = 0; b < N; ++b)
      for (ptrdiff_t c = 0; c < N; ++c)
        field[(a * N + b) * 2 * nk + c] = normal01(seed, noise_stream, uint64_t(((z0 + a) * N + b) * N + c));
  fftw_execute(fwd);
  // White noise with unit variance per cell has <|W_k|^2> = cells; the DFT of
  // a field with power P has <|d_k|^2> = cells * P(k) / dV. Transposed
  // layout: the local rows are the second index.
  const double dk = 2 * kPi / (double(n) * kVoxelMpc), dv = std::pow(kVoxelMpc, 3);
  for (ptrdiff_t bl = 0; bl < n1; ++bl)
    for (ptrdiff_t a = 0; a < N; ++a)
      for (ptrdiff_t c = 0; c < nk; ++c) {
        ptrdiff_t b = y0 + bl;
        double ka = double(a <= N / 2 ? a : a - N), kb = double(b <= N / 2 ? b : b - N), kc = double(c);
        double k = dk * std::sqrt(ka * ka + kb * kb + kc * kc);
        double amp = k > 0 ? std::sqrt(P(k) / dv) / cells : 0.0;  // 1/cells: FFTW's inverse is unnormalised
        auto& m = modes[(bl * N + a) * nk + c];
        m[0] *= amp;
        m[1] *= amp;
      }
  fftw_execute(inv);
  double var = 0;
  for (ptrdiff_t a = 0; a < n0; ++a)
    for (ptrdiff_t b = 0; b < N; ++b)
      for (ptrdiff_t c = 0; c < N; ++c) var += field[(a * N + b) * 2 * nk + c] * field[(a * N + b) * 2 * nk + c];
  group.allreduce_sum(&var, 1);
  var /= cells;

  // Log-normal density and Poisson counts on the slab, keyed by global cell.
  std::vector<int16_t> slab(size_t(4 * n0 * N * N));
  for (int ch = 0; ch < 4; ++ch) {
    double d = growth(kRedshifts[ch], p.omega_m), s2 = d * d * var;
    uint64_t stream = kStreamCounts ^ (uint64_t(index) << 20) ^ (uint64_t(ch) << 8);
#pragma omp parallel for collapse(2) schedule(static)
    for (ptrdiff_t a = 0; a < n0; ++a)
      for (ptrdiff_t b = 0; b < N; ++b)
        for (ptrdiff_t c = 0; c < N; ++c) {
          double rho = std::exp(d * float(field[(a * N + b) * 2 * nk + c]) - 0.5 * s2);
          uint64_t cell = uint64_t(((z0 + a) * N + b) * N + c);
          slab[size_t(((ch * n0 + a) * N + b) * N + c)] =
              int16_t(std::min<int64_t>(32767, poisson(kMeanCount * rho, seed, stream, cell)));
        }
  }
  fftw_destroy_plan(fwd);
  fftw_destroy_plan(inv);
  fftw_free(field);
  return slabs_to_blocks(group, n, slab, z0, n0, box);
}

SyntheticUniverses::SyntheticUniverses(const Comm& group, int64_t side, int64_t count, uint64_t seed, int64_t offset,
                                       InputTransform t)
    : group_(group), side_(side), count_(count), seed_(seed), offset_(offset), transform_(t) {
  H3D_USAGE_CHECK(count >= 1, "synthetic data needs at least one sample (got " << count << ")");
}

void SyntheticUniverses::load_counts(int64_t index, const Box& box, int16_t* out, float* target) {
  H3D_CHECK(index >= 0 && index < count_, "sample index " << index << " out of range");
  const int64_t gid = offset_ + index;
  universe_unit_par(seed_, gid, target);
  float u[4];
  const std::vector<int16_t> b = generate_universe_block(group_, side_, seed_, gid, box, u);
  std::copy(b.begin(), b.end(), out);
}

void SyntheticUniverses::load(int64_t index, const Box& box, float* out, float* target) {
  std::vector<int16_t> counts(size_t(channels() * box.volume()));
  load_counts(index, box, counts.data(), target);
  transform_counts(transform_, counts.data(), out, int64_t(counts.size()));
}

int64_t SyntheticUniverses::group_max(int64_t v) const {
  return group_.size() == 1 ? v : int64_t(group_.allreduce_max(double(v)));
}

std::string SyntheticUniverses::describe() const {
  std::ostringstream os;
  os << count_ << " synthetic universes of " << side_ << "^3 x 4 (seed " << seed_ << ", first index " << offset_ << ")";
  return os.str();
}

}  // namespace h3d
