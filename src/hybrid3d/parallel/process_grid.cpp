#include "hybrid3d/parallel/process_grid.hpp"

#include <sstream>

#include "hybrid3d/core/error.hpp"

namespace h3d {

ProcessGrid::ProcessGrid(const Comm& world, std::array<int, 3> spatial) : world_(&world), spatial_(spatial) {
  for (int v : spatial) H3D_USAGE_CHECK(v >= 1, "--spatial: every factor must be at least 1");
  int S = spatial_size();
  H3D_USAGE_CHECK(world.size() % S == 0,
                  "--spatial " << spatial[0] << "x" << spatial[1] << "x" << spatial[2] << " needs a multiple of "
                               << S << " ranks, but the job has " << world.size()
                               << "; use -np " << S << " (or a multiple) or a spatial split whose product divides "
                               << world.size());
  groups_ = world.size() / S;
  g_ = world.rank() / S;
  int s = world.rank() % S;
  coord_ = {s / (spatial[1] * spatial[2]), (s / spatial[2]) % spatial[1], s % spatial[2]};
  if (world.is_simulated()) {  // one rank of a layout, replayed by the memory planner
    group_ = Comm::simulated(s, S);
    replicas_ = Comm::simulated(g_, groups_);
    return;
  }
  group_ = world.split(g_, s);
  replicas_ = world.split(s, g_);
}

std::string ProcessGrid::describe() const {
  std::ostringstream os;
  os << world_->size() << " ranks = " << groups_ << " data group(s) x spatial " << spatial_[0] << "x" << spatial_[1]
     << "x" << spatial_[2];
  return os.str();
}

}  // namespace h3d
