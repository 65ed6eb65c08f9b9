// ShardedState: ZeRO stages 1 and 2 (Rajbhandari et al., SC'20), as
// `train --shard-optimizer` does them.
//
// The parameters, in network order, are laid end to end as one flat vector
// of N floats, cut into one contiguous shard per rank of the world (bounds
// at multiples of 16 floats, shard_bound). Each rank
//  - receives only its shard of the summed gradients: the gradient reducer
//    reduce-scatters each bucket instead of allreducing it, and gives each
//    parameter's full gradient back to the pool once its bucket is sent
//    (stage 2; it is taken again before that layer's next backward);
//  - holds the optimizer's slots for its shard alone and updates only its
//    shard of the weights (stage 1);
//  - then every rank gets every shard's new weights (allgather, in chunks
//    of the bucket size so that no full-size buffer is needed).
// Parameters whose layer completes the gradient itself (batch norm; every
// parameter under --deterministic) keep their full gradient; each rank takes
// its shard of it without communication, so --deterministic stays bitwise.
//
// The weights stay replicated (what the convolutions of every rank read),
// but for those held in parts (Param::part: fc1 on a spatial input), which
// are not in the flat vector: each rank already holds a part of its group's
// alone, sums its gradient over the replicas (GradientReducer) and updates
// it whole, with its optimizer slots.
// Checkpoints keep their format: the slots are gathered to rank 0 to be
// written, and each rank takes its shard of a loaded state.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "hybrid3d/core/tensor.hpp"
#include "hybrid3d/layers/layer.hpp"
#include "hybrid3d/parallel/comm.hpp"
#include "hybrid3d/parallel/process_grid.hpp"
#include "hybrid3d/train/optimizer.hpp"

namespace h3d {

class ShardedState {
 public:
  // `params`: the network's, in network order. Not collective.
  ShardedState(const std::vector<Param*>& params, int rank, int ranks);

  int64_t total() const { return starts_.back(); }
  // Rank q's shard [lo(q), hi(q)) of the flat vector.
  int64_t lo(int q) const { return bounds_[size_t(q)]; }
  int64_t hi(int q) const { return bounds_[size_t(q) + 1]; }
  int64_t start_of(const Param* p) const;
  // This rank's slices of the parameters, with their reduced gradients
  // (the flat vector's, then each part whole).
  const std::vector<ParamSlice>& slices() const { return slices_; }
  // This rank's shard of the gradient of the flat elements [a, a + n).
  float* shard_grad(int64_t a) { return grads_.data() + (a - lo(rank_)); }
  // Per rank, how many of the flat elements [a, b) it owns.
  std::vector<int> owned_counts(int64_t a, int64_t b) const;

  // The gradients no reducer bucket carries (completed by their layer):
  // this rank's part of each, copied into its shard. After finish().
  void take_complete_gradients();
  // "" if this rank's shard of every gradient is finite on every rank, else
  // the name of the first parameter (in backward order) with one that is
  // not. Collective.
  std::string first_nonfinite(Backend& backend, const Comm& world) const;
  // Every rank's updated shard of the weights, to every rank. Collective.
  void allgather_weights(const Comm& world, int64_t chunk_floats);
  // The optimizer's whole state (as a replicated optimizer's state() of
  // every parameter) on rank 0; the steps on every rank. Collective.
  OptimizerState gather_state(const Comm& world, const Optimizer& opt) const;

 private:
  std::vector<Param*> all_;                  // every parameter, in network order
  std::unordered_map<const Param*, int> order_;  // index in all_
  std::vector<Param*> params_;               // the flat vector's
  std::vector<Param*> parts_;                // held in parts
  std::vector<int64_t> starts_;  // flat start of each parameter; the last: N
  std::vector<int64_t> bounds_;  // shard bounds, one per rank and N
  int rank_ = 0;
  Tensor grads_;  // this rank's shard of the gradient
  std::vector<ParamSlice> slices_;
};

// The optimizer's whole state on rank 0 (state() of every parameter):
// gathered from the shards, or rank 0's own when not sharded. Collective.
OptimizerState whole_optimizer_state(const ProcessGrid& grid, const Optimizer& opt, const std::vector<Param*>& params,
                                     const ShardedState* shards);

}  // namespace h3d
