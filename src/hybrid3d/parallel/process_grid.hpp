// ProcessGrid: the world's ranks as (data group) x (D x H x W) spatial blocks.
//
// World rank r = g * S + s, where S = D*H*W is the spatial group size, g the
// data-parallel group and s = (d*H + h)*W + w the spatial rank inside it, so
// the ranks sharing one sample are neighbours in the world numbering (and on
// the same node when mpirun fills nodes in order).
#pragma once
#include <array>
#include <string>

#include "hybrid3d/parallel/comm.hpp"

namespace h3d {

class ProcessGrid {
 public:
  // Collective over `world`. Throws UsageError if world.size() is not a
  // multiple of D*H*W. On a simulated world (Comm::simulated) the group and
  // replica communicators are simulated too.
  ProcessGrid(const Comm& world, std::array<int, 3> spatial);

  const Comm& world() const { return *world_; }
  const Comm& group() const { return group_; }      // the ranks of my spatial group
  const Comm& replicas() const { return replicas_; }  // same spatial block, every group
  int data_groups() const { return groups_; }
  int group_index() const { return g_; }
  const std::array<int, 3>& spatial() const { return spatial_; }
  const std::array<int, 3>& coord() const { return coord_; }  // my block's (d, h, w)
  int spatial_size() const { return spatial_[0] * spatial_[1] * spatial_[2]; }
  int spatial_rank() const { return group_.rank(); }
  bool is_group_root() const { return group_.rank() == 0; }
  std::string describe() const;


 private:
  const Comm* world_;
  std::array<int, 3> spatial_;
  std::array<int, 3> coord_{};
  int groups_ = 1, g_ = 0;
  Comm group_, replicas_;
};

}  // namespace h3d
