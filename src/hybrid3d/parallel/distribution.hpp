// Distribution: how one spatial activation is cut into blocks over a
// spatial group. A value: grid shape, global extents, block bounds per
// dimension. Cheap to copy and compare.
//
// A window op (conv, pool) maps a Distribution to its output Distribution:
// with kernel k, stride s, padding p_lo/p_hi on extent N the output extent is
// M = (N + p_lo + p_hi - k)/s + 1, and an input bound b becomes the output
// bound ceil(b/s) (clipped to M), so stride-2 layers halve the blocks. The
// input a rank needs for outputs [o0, o1) is [o0*s - p_lo, (o1-1)*s - p_lo + k);
// what sticks out of its own block is its halo (see docs/parallelism.md).
#pragma once
#include <array>
#include <string>
#include <vector>

#include "hybrid3d/core/box.hpp"

namespace h3d {

// Window geometry along one dimension.
struct Window1D {
  int k = 1, s = 1, p_lo = 0, p_hi = 0;
  int64_t out_extent(int64_t n) const { return (n + p_lo + p_hi - k) / s + 1; }
  // Input range (unclipped: may reach into the padding) needed for outputs [o.lo, o.hi).
  Range needed(const Range& o) const {
    if (o.empty()) return {0, 0};
    return {o.lo * s - p_lo, (o.hi - 1) * s - p_lo + k};
  }
  // Outputs (of out_extent) whose windows read some cell of input range i.
  Range touching(const Range& i, int64_t out_extent) const {
    if (i.empty()) return {0, 0};
    auto floor_div = [](int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
    return Range{floor_div(i.lo + p_lo - k, s) + 1, floor_div(i.hi - 1 + p_lo, s) + 1}.intersect({0, out_extent});
  }
};
using Window3D = std::array<Window1D, 3>;

class Distribution {
 public:
  Distribution() = default;
  // Balanced split of `extent` over `grid`, bounds at multiples of `align`
  // where the extent allows it (so that later stride-2 layers halve evenly).
  static Distribution balanced(std::array<int64_t, 3> extent, std::array<int, 3> grid, int64_t align = 1);
  Distribution(std::array<int64_t, 3> extent, std::array<int, 3> grid, std::array<std::vector<int64_t>, 3> bounds);

  const std::array<int64_t, 3>& extent() const { return extent_; }
  const std::array<int, 3>& grid() const { return grid_; }
  const std::vector<int64_t>& bounds(int dim) const { return bounds_[static_cast<size_t>(dim)]; }
  int group_size() const { return grid_[0] * grid_[1] * grid_[2]; }
  std::array<int, 3> coord_of(int spatial_rank) const;
  Box box(int spatial_rank) const;
  int64_t global_volume() const { return extent_[0] * extent_[1] * extent_[2]; }

  // The output distribution of a window op; throws UsageError (naming
  // `layer`) if any block would be empty.
  Distribution through(const Window3D& w, const std::string& layer) const;
  // Largest halo (before, after) over all blocks, per dimension.
  std::array<std::array<int64_t, 2>, 3> halo_widths(const Window3D& w, const Distribution& out) const;
  // Throws UsageError naming `layer` if some block is empty.
  void require_nonempty(const std::string& layer) const;

  bool operator==(const Distribution& o) const {
    return extent_ == o.extent_ && grid_ == o.grid_ && bounds_ == o.bounds_;
  }
  bool operator!=(const Distribution& o) const { return !(*this == o); }
  std::string describe() const;

 private:
  std::array<int64_t, 3> extent_{};
  std::array<int, 3> grid_{1, 1, 1};
  std::array<std::vector<int64_t>, 3> bounds_;
};

}  // namespace h3d
