#include "hybrid3d/plan/gradient_buckets.hpp"

#include <limits>

#include "hybrid3d/core/error.hpp"

namespace h3d {

std::vector<std::vector<Param*>> gradient_buckets(const std::vector<std::vector<Param*>>& layers,
                                                  int64_t bucket_bytes) {
  H3D_CHECK(bucket_bytes > 0, "allreduce bucket size must be positive");
  std::vector<std::vector<Param*>> buckets;
  int64_t floats = 0;
  for (size_t l = layers.size(); l-- > 0;) {
    bool first_layer_starts = l == 0;
    for (auto it = layers[l].rbegin(); it != layers[l].rend(); ++it) {
      Param* p = *it;
      if (p->reduce == GradReduce::kComplete || p->part) continue;
      H3D_CHECK(p->grad.numel() < std::numeric_limits<int>::max(),
                "parameter " << p->name << " is too large for one MPI allreduce");
      const bool full = floats > 0 && (floats + p->grad.numel()) * int64_t(sizeof(float)) > bucket_bytes;
      if (buckets.empty() || full || (first_layer_starts && floats > 0)) {
        buckets.emplace_back();
        floats = 0;
      }
      first_layer_starts = false;
      buckets.back().push_back(p);
      floats += p->grad.numel();
    }
  }
  return buckets;
}

int64_t shard_bound(int64_t total, int ranks, int q) {
  constexpr int64_t kAlign = 16;
  return q >= ranks ? total : q * total / ranks / kAlign * kAlign;
}

}  // namespace h3d
