#include "hybrid3d/train/grad_reducer.hpp"

#include <algorithm>

#include "hybrid3d/core/profiler.hpp"

namespace h3d {

void GradientReducer::reduce(const ProcessGrid& grid, const std::vector<Param*>& params) {
  int64_t total = 0;
  for (auto* p : params)
    if (p->reduce != GradReduce::kComplete) total += p->grad.numel();
  flat_.resize(size_t(total));
  int64_t off = 0;
  bool root = grid.is_group_root();
  for (auto* p : params) {
    if (p->reduce == GradReduce::kComplete) continue;
    if (p->reduce == GradReduce::kGroupReplicated && !root) {
      std::fill_n(flat_.data() + off, p->grad.numel(), 0.0f);
    } else {
      std::copy_n(p->grad.data(), p->grad.numel(), flat_.data() + off);
    }
    off += p->grad.numel();
  }
  {
    ProfileScope timed(prof::kAllreduceExposed, prof::kAllreduceTotal);
    grid.world().allreduce_sum(flat_.data(), total);
  }
  off = 0;
  for (auto* p : params) {
    if (p->reduce == GradReduce::kComplete) continue;
    std::copy_n(flat_.data() + off, p->grad.numel(), p->grad.data());
    off += p->grad.numel();
  }
}

}  // namespace h3d
