// How a step's gradients are grouped for their reduction across ranks, and
// how --shard-optimizer cuts the parameters into shards
// (train/grad_reducer.hpp and train/sharded_state.hpp do it;
// plan/memory_model.hpp replays it, which the sharded memory depends on).
#pragma once
#include <cstdint>
#include <vector>

#include "hybrid3d/layers/layer.hpp"

namespace h3d {

// Buckets of about `bucket_bytes` of the gradients that need reducing over
// the world (all but GradReduce::kComplete and those held in parts, which
// are summed over the replicas alone), in the order backward finishes them: the last
// layer first, as PyTorch's DDP does. The first layer's gradients get a
// bucket of their own: everything else is on its way while its (long)
// backward runs. `layers`: each layer's parameters, in network order.
std::vector<std::vector<Param*>> gradient_buckets(const std::vector<std::vector<Param*>>& layers,
                                                  int64_t bucket_bytes);

// Where rank q's shard of a flat vector of `total` floats starts
// (q = ranks: total). Bounds fall on multiples of 16 floats: no two ranks'
// updates share a 64-byte cache line.
int64_t shard_bound(int64_t total, int ranks, int q);

}  // namespace h3d
