#include "hybrid3d/parallel/distribution.hpp"

#include <sstream>

#include "hybrid3d/core/error.hpp"

namespace h3d {

static const char* kDimName[3] = {"D", "H", "W"};

Distribution::Distribution(std::array<int64_t, 3> extent, std::array<int, 3> grid,
                           std::array<std::vector<int64_t>, 3> bounds)
    : extent_(extent), grid_(grid), bounds_(std::move(bounds)) {
  for (int d = 0; d < 3; ++d) {
    const auto& b = bounds_[d];
    H3D_CHECK(static_cast<int>(b.size()) == grid_[d] + 1 && b.front() == 0 && b.back() == extent_[d],
              "Distribution: bounds of dimension " << kDimName[d] << " do not cover [0, " << extent_[d] << ")");
    for (size_t i = 1; i < b.size(); ++i) H3D_CHECK(b[i] >= b[i - 1], "Distribution: bounds not sorted");
  }
}

Distribution Distribution::balanced(std::array<int64_t, 3> extent, std::array<int, 3> grid, int64_t align) {
  std::array<std::vector<int64_t>, 3> bounds;
  for (int d = 0; d < 3; ++d) {
    int64_t n = extent[d], p = grid[d];
    int64_t units = (align > 1 && n % align == 0 && n / align >= p) ? n / align : n;
    int64_t unit = n / units;
    for (int64_t i = 0; i <= p; ++i) bounds[d].push_back(unit * ((i * units) / p));
  }
  return Distribution(extent, grid, std::move(bounds));
}

std::array<int, 3> Distribution::coord_of(int s) const {
  return {s / (grid_[1] * grid_[2]), (s / grid_[2]) % grid_[1], s % grid_[2]};
}

Box Distribution::box(int s) const {
  auto c = coord_of(s);
  Box b;
  for (int d = 0; d < 3; ++d) b.r[d] = {bounds_[d][c[d]], bounds_[d][c[d] + 1]};
  return b;
}

void Distribution::require_nonempty(const std::string& layer) const {
  for (int d = 0; d < 3; ++d) {
    const auto& b = bounds_[d];
    for (size_t i = 1; i < b.size(); ++i) {
      if (b[i] > b[i - 1]) continue;
      std::ostringstream sizes;
      // The first blocks show the pattern; a split over thousands of ranks
      // would otherwise print thousands of numbers.
      constexpr size_t kShown = 8;
      for (size_t j = 1; j < b.size() && j <= kShown; ++j) sizes << (j > 1 ? ", " : "") << b[j] - b[j - 1];
      if (b.size() - 1 > kShown) sizes << ", ... (" << b.size() - 1 << " blocks)";
      H3D_THROW(UsageError, "layer " << layer << ": dimension " << kDimName[d] << " has extent " << extent_[d]
                                     << ", which cannot be split over " << grid_[d] << " ranks (blocks of "
                                     << sizes.str() << " voxels); use at most " << extent_[d]
                                     << " ranks along " << kDimName[d]
                                     << " for this layer (a smaller --spatial factor) or a larger --input-size");
    }
  }
}

Distribution Distribution::through(const Window3D& w, const std::string& layer) const {
  std::array<int64_t, 3> out_ext;
  std::array<std::vector<int64_t>, 3> out_b;
  for (int d = 0; d < 3; ++d) {
    int64_t m = w[d].out_extent(extent_[d]);
    H3D_USAGE_CHECK(m >= 1, "layer " << layer << ": input extent " << extent_[d] << " along " << kDimName[d]
                                     << " is smaller than its kernel " << w[d].k << "; use a larger --input-size");
    out_ext[d] = m;
    for (auto b : bounds_[d]) out_b[d].push_back(std::min(m, (b + w[d].s - 1) / w[d].s));
    out_b[d].back() = m;
  }
  Distribution out(out_ext, grid_, std::move(out_b));
  out.require_nonempty(layer);
  return out;
}

std::array<std::array<int64_t, 2>, 3> Distribution::halo_widths(const Window3D& w, const Distribution& out) const {
  std::array<std::array<int64_t, 2>, 3> h{};
  for (int s = 0; s < group_size(); ++s) {
    Box own = box(s), ob = out.box(s);
    for (int d = 0; d < 3; ++d) {
      Range need = w[d].needed(ob.r[d]).intersect({0, extent_[d]});
      h[d][0] = std::max(h[d][0], own.r[d].lo - need.lo);
      h[d][1] = std::max(h[d][1], need.hi - own.r[d].hi);
    }
  }
  return h;
}

std::string Distribution::describe() const {
  std::ostringstream os;
  os << extent_[0] << "x" << extent_[1] << "x" << extent_[2] << " over " << grid_[0] << "x" << grid_[1] << "x"
     << grid_[2];
  return os.str();
}

}  // namespace h3d
