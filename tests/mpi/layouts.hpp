// Layouts tested for each world size, and helpers to ship the serial
// (1-rank) oracle's tensors from rank 0 to every rank.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "hybrid3d/core/tensor.hpp"
#include "hybrid3d/layers/param_part.hpp"
#include "hybrid3d/parallel/comm.hpp"
#include "hybrid3d/parallel/process_grid.hpp"

namespace h3d::test {

// World 2: data-only, spatial along each single dimension.
// World 3: uneven blocks. World 4: 2x2x1, 2 data x 2x1x1, 1x4x1 (one- and
// two-voxel blocks, halos wider than a block). World 8: 2x2x2, 1x4x2, and
// 2 data groups x 2x2x1.
inline std::vector<std::array<int, 3>> layouts_for(int world) {
  switch (world) {
    case 1: return {{1, 1, 1}};
    case 2: return {{1, 1, 1}, {2, 1, 1}, {1, 2, 1}, {1, 1, 2}};
    case 3: return {{3, 1, 1}, {1, 1, 3}};
    case 4: return {{2, 2, 1}, {2, 1, 1}, {1, 4, 1}};
    case 8: return {{2, 2, 2}, {1, 4, 2}, {2, 2, 1}};
    default: return {{1, 1, 1}};
  }
}

inline std::string name(const std::array<int, 3>& l) {
  return std::to_string(l[0]) + "x" + std::to_string(l[1]) + "x" + std::to_string(l[2]);
}

// Rank 0's tensor to everyone (shape included).
inline void bcast_tensor(const Comm& c, Tensor& t) {
  int64_t nd = t.ndim();
  c.bcast(&nd, sizeof nd, 0);
  std::vector<int64_t> shape = t.shape();
  shape.resize(size_t(nd));
  c.bcast(shape.data(), int64_t(nd * sizeof(int64_t)), 0);
  if (c.rank() != 0) t.resize(shape);
  c.bcast(t.data(), t.numel() * int64_t(sizeof(float)), 0);
}

// `t` (p's value or gradient on this rank) as the 1-rank run holds it: a
// parameter held in parts (Param::part) made whole on every rank of the
// group; any other, unchanged.
inline Tensor whole(const ProcessGrid& grid, const Param& p, const Tensor& t) {
  if (!p.part) return t;
  const std::vector<float> w = gather_whole(grid.group(), p, t.data());
  Tensor out;
  if (grid.group().rank() == 0) {
    out.resize(p.whole_shape());
    std::copy(w.begin(), w.end(), out.data());
  }
  bcast_tensor(grid.group(), out);
  return out;
}

}  // namespace h3d::test
