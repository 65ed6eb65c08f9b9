// Half-open index ranges and 3D boxes in global voxel coordinates (D, H, W).
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <ostream>

namespace h3d {

struct Range {
  int64_t lo = 0, hi = 0;  // [lo, hi)
  int64_t size() const { return hi > lo ? hi - lo : 0; }
  bool empty() const { return hi <= lo; }
  Range intersect(const Range& o) const { return {std::max(lo, o.lo), std::min(hi, o.hi)}; }
  bool operator==(const Range& o) const { return lo == o.lo && hi == o.hi; }
};

struct Box {
  std::array<Range, 3> r;  // D, H, W
  int64_t volume() const { return r[0].size() * r[1].size() * r[2].size(); }
  bool empty() const { return r[0].empty() || r[1].empty() || r[2].empty(); }
  Box intersect(const Box& o) const {
    return Box{{r[0].intersect(o.r[0]), r[1].intersect(o.r[1]), r[2].intersect(o.r[2])}};
  }
  bool contains(const Box& o) const {
    for (int d = 0; d < 3; ++d)
      if (o.r[d].lo < r[d].lo || o.r[d].hi > r[d].hi) return false;
    return true;
  }
  bool operator==(const Box& o) const { return r == o.r; }
  std::array<int64_t, 3> extents() const { return {r[0].size(), r[1].size(), r[2].size()}; }
};

inline std::ostream& operator<<(std::ostream& os, const Box& b) {
  return os << "[" << b.r[0].lo << "," << b.r[0].hi << ")x[" << b.r[1].lo << "," << b.r[1].hi << ")x[" << b.r[2].lo
            << "," << b.r[2].hi << ")";
}

}  // namespace h3d
