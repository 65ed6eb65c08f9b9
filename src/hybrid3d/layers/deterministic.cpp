#include "hybrid3d/layers/deterministic.hpp"

#include <algorithm>
#include <sstream>

#include "hybrid3d/core/error.hpp"

namespace h3d {

void use_deterministic_tiles(ActShape& in, int64_t align) {
  std::array<int, 3> cells{};
  for (int d = 0; d < 3; ++d) {
    const int64_t e = in.dist.extent()[size_t(d)];
    // An extent that is not a multiple of the alignment is tiled per voxel.
    cells[size_t(d)] = int(align > 1 && e % align == 0 ? e / align : e);
  }
  in.deterministic = true;
  in.tiles = Distribution::balanced(in.dist.extent(), cells, align);
}

void require_blocks_on_tiles(const ActShape& s, const std::string& layer) {
  if (!s.deterministic || !s.spatial) return;
  static const char* kDim[3] = {"D", "H", "W"};
  for (int d = 0; d < 3; ++d) {
    const auto& tb = s.tiles.bounds(d);
    for (int64_t b : s.dist.bounds(d)) {
      if (std::binary_search(tb.begin(), tb.end(), b)) continue;
      std::ostringstream sizes;
      for (size_t j = 1; j < s.dist.bounds(d).size(); ++j)
        sizes << (j > 1 ? ", " : "") << s.dist.bounds(d)[j] - s.dist.bounds(d)[j - 1];
      H3D_THROW(UsageError, "--deterministic: at layer " << layer << " dimension " << kDim[d]
                                                          << " is split into blocks of " << sizes.str()
                                                          << " voxels, which are not unions of its "
                                                          << s.tiles.grid()[size_t(d)]
                                                          << " fixed tiles; split each dimension into at most "
                                                          << s.tiles.grid()[size_t(d)]
                                                          << " blocks of whole tiles (a smaller --spatial factor)");
    }
  }
}

std::vector<Box> local_tiles(const ActShape& s, int spatial_rank) {
  const Box block = s.dist.box(spatial_rank);
  std::vector<Box> out;
  for (int t = 0; t < s.tiles.group_size(); ++t) {
    Box b = s.tiles.box(t);
    if (b.empty() || !block.contains(b)) continue;
    for (int d = 0; d < 3; ++d) b.r[size_t(d)] = {b.r[d].lo - block.r[d].lo, b.r[d].hi - block.r[d].lo};
    out.push_back(b);
  }
  return out;
}

void exact_conv_weight_grad(Backend& backend, const Comm& world, const ConvDesc& d, const float* xp,
                            const float* dy, const std::vector<Box>& tiles, ExactSum& w_sum, float* dw,
                            float* db) {
  const int64_t in_vol = d.in[0] * d.in[1] * d.in[2], out_vol = d.out[0] * d.out[1] * d.out[2];
  const int64_t nw = d.cout * d.cin * int64_t(d.k[0]) * d.k[1] * d.k[2];
  // The grid of the exact sums: |any sum| <= (terms) * max|dy| * max|x|.
  const double mdy = global_max_abs(world, dy, d.n * d.cout * out_vol);
  const double mx = global_max_abs(world, xp, d.n * d.cin * in_vol);
  const double terms = double(world.allreduce_sum(d.n * out_vol));
  w_sum.reset(nw, terms * mdy * mx);
  ExactSum b_sum(db ? d.cout : 0, terms * mdy);
  ConvDesc one = d;
  one.n = 1;
  std::vector<float> xt, dyt, dwt(static_cast<size_t>(nw)), dbt(static_cast<size_t>(d.cout));
  for (int64_t s = 0; s < d.n; ++s)
    for (const Box& t : tiles) {
      std::array<int64_t, 3> origin{};
      const ConvDesc sub = sub_convolution(one, t, origin);
      xt.resize(size_t(d.cin * sub.in[0] * sub.in[1] * sub.in[2]));
      dyt.resize(size_t(d.cout * t.volume()));
      copy_region(xp + s * d.cin * in_vol, xt.data(), d.cin, d.in, origin, sub.in, false);
      copy_region(dy + s * d.cout * out_vol, dyt.data(), d.cout, d.out, {t.r[0].lo, t.r[1].lo, t.r[2].lo},
                  t.extents(), false);
      backend.conv3d_backward_weights(sub, xt.data(), dyt.data(), dwt.data(), db ? dbt.data() : nullptr);
      w_sum.add_all(dwt.data());
      if (db) b_sum.add_all(dbt.data());
    }
  w_sum.allreduce(world);
  w_sum.values(dw);
  if (!db) return;
  b_sum.allreduce(world);
  b_sum.values(db);
}

void exact_channel_sums(const Comm& world, const float* dy, int64_t n, int64_t channels,
                        const std::array<int64_t, 3>& ext, const std::vector<Box>& tiles, float* out) {
  const int64_t vol = ext[0] * ext[1] * ext[2];
  const double m = global_max_abs(world, dy, n * channels * vol);
  ExactSum sum(channels, double(world.allreduce_sum(n * vol)) * m);
  add_tile_sums(n, channels, ext, tiles, sum, [&](int64_t, int64_t i) { return double(dy[i]); });
  sum.allreduce(world);
  sum.values(out);
}

void OwnInputGrad::plan(const Distribution& in, const Window3D& w, const Distribution& out, int me,
                        const std::string& layer) {
  auto touching = [&](int q) {
    const Box b = in.box(q);
    Box t;
    for (int d = 0; d < 3; ++d) t.r[size_t(d)] = w[size_t(d)].touching(b.r[d], out.extent()[size_t(d)]);
    return t;
  };
  halo_ = HaloExchange(out, touching, me, 0.0f);
  const Box own = in.box(me), t = touching(me);
  for (size_t d = 0; d < 3; ++d) {
    const int64_t lo = t.r[d].lo * w[d].s - w[d].p_lo, hi = (t.r[d].hi - 1) * w[d].s - w[d].p_lo + w[d].k;
    H3D_USAGE_CHECK(!t.r[d].empty() && lo <= own.r[d].lo && hi >= own.r[d].hi,
                    "--deterministic: layer " << layer << " has input cells that no output reads (kernel "
                                              << w[d].k << ", stride " << w[d].s
                                              << "); this mode needs every input cell read");
    in_ext_[d] = own.r[d].size();
    out_ext_[d] = t.r[d].size();
    pad_lo_[d] = int(own.r[d].lo - lo);
    pad_hi_[d] = int(hi - own.r[d].hi);
  }
}

const Tensor& OwnInputGrad::gather(const StepContext& ctx, const Tensor& dy) {
  if (halo_.trivial()) return dy;
  halo_.start(ctx.grid->group(), *ctx.backend, dy, dyp_);
  halo_.finish(*ctx.backend, dyp_);
  return dyp_;
}

}  // namespace h3d
