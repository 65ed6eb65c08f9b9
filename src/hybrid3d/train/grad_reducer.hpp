// GradientReducer: completes every parameter's gradient across the job so
// that all ranks hold the same global gradient.
//   kPartialSum      -> summed over all ranks
//   kGroupReplicated -> only each group's spatial root contributes (the
//                       others add zeros), so the sum runs over data groups
//   kComplete        -> left alone (the layer already reduced it)
// All of it goes in one flat buffer and one allreduce over the world.
// (Bucketed, non-blocking reduction overlapping backward is a later step.)
#pragma once
#include <vector>

#include "hybrid3d/dist/process_grid.hpp"
#include "hybrid3d/layers/layer.hpp"

namespace h3d {

class GradientReducer {
 public:
  void reduce(const ProcessGrid& grid, const std::vector<Param*>& params);

 private:
  std::vector<float> flat_;
};

}  // namespace h3d
