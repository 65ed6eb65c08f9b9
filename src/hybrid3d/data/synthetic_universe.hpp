// Synthetic universes: a small, learnable stand-in for CosmoFlow's N-body
// data, deterministic from (seed, sample index).
//
// Four parameters u in [-1, 1]^4 (CosmoFlow's unitPar) map to
//   Omega_m = 0.30 + 0.15 u0, sigma_8 = 0.80 + 0.15 u1,
//   n_s     = 0.96 + 0.16 u2, H_0    = 70 + 15 u3   (h = H_0 / 100)
// (ranges wider than today's error bars, so that small cubes carry a signal).
// A Gaussian random field on the periodic cube (voxel 4 Mpc/h) has the
// linear power spectrum P(k) = A k^n_s T(k)^2 with the BBKS transfer function
// of shape Gamma = Omega_m h, normalised to sigma_8 at z = 0. The four
// channels are that field at z = 0, 0.5, 1, 2, scaled by the growth factor
// D(z) (Carroll, Press & Turner), so their ratio depends on Omega_m; each is
// turned into non-negative galaxy counts by a log-normal transform and
// Poisson sampling (mean 32 per voxel: shot noise
// low enough that the spectrum's shape shows), stored as int16 like the real data.
#pragma once
#include <vector>

#include "hybrid3d/data/sample_source.hpp"
#include "hybrid3d/parallel/comm.hpp"

namespace h3d {

struct CosmoParams {
  double omega_m, sigma_8, n_s, h;
  static CosmoParams from_unit(const float u[4]);
};

// This rank's `box` of universe `index`, [4, box] int16 channels first.
// Collective over `group` (the ranks of one sample, each with its own box):
// the field is built by a distributed FFT (FFTW's MPI interface, in double)
// on slabs of D, and the counts are sent from the slabs to the boxes, so no
// rank ever holds the whole cube. The noise and the Poisson draws are keyed
// by global cell index: the counts do not depend on the layout (up to FFT
// rounding, which the double transform keeps far below the float the
// counts are drawn from; tests compare layouts exactly).
std::vector<int16_t> generate_universe_block(const Comm& group, int64_t side, uint64_t seed, int64_t index,
                                             const Box& box, float unit_par[4]);
// The unitPar of sample `index` (cheap: no field is generated).
void universe_unit_par(uint64_t seed, int64_t index, float unit_par[4]);

class SyntheticUniverses : public SampleSource {
 public:
  // Samples index_offset .. index_offset + count - 1 of the stream `seed`.
  // load() is collective over `group`: its ranks load the same samples in
  // the same order, each its own box.
  SyntheticUniverses(const Comm& group, int64_t side, int64_t count, uint64_t seed, int64_t index_offset,
                     InputTransform t);
  int64_t size() const override { return count_; }
  std::array<int64_t, 3> extent() const override { return {side_, side_, side_}; }
  int64_t channels() const override { return 4; }
  // Generates the block every time (a distributed FFT of the whole cube):
  // the trainer keeps blocks in a DataStore, inside the run's CacheBudget.
  void load(int64_t index, const Box& box, float* out, float* target) override;
  bool has_counts() const override { return true; }
  void load_counts(int64_t index, const Box& box, int16_t* out, float* target) override;
  InputTransform counts_transform() const override { return transform_; }
  std::string describe() const override;
  // load() is collective over the group: a cache above decides alike on its ranks.
  int64_t group_max(int64_t v) const override;

 private:
  const Comm& group_;
  int64_t side_, count_;
  uint64_t seed_;
  int64_t offset_;
  InputTransform transform_;
};

}  // namespace h3d
