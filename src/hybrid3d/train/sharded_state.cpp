#include "hybrid3d/train/sharded_state.hpp"

#include <algorithm>
#include <map>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/layers/param_part.hpp"
#include "hybrid3d/plan/gradient_buckets.hpp"

namespace h3d {

ShardedState::ShardedState(const std::vector<Param*>& params, int rank, int ranks) : rank_(rank) {
  H3D_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "shard " << rank << " of " << ranks);
  all_ = params;
  for (Param* p : params) {
    order_[p] = int(order_.size());
    (p->part ? parts_ : params_).push_back(p);
  }
  starts_.push_back(0);
  for (const Param* p : params_) starts_.push_back(starts_.back() + p->value.numel());
  const int64_t n = starts_.back();
  for (int q = 0; q <= ranks; ++q) bounds_.push_back(shard_bound(n, ranks, q));
  if (!params_.empty()) grads_.set_allocator(params_.front()->value.allocator());
  grads_.reshape_uninit({hi(rank_) - lo(rank_)});
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t a = std::max(starts_[i], lo(rank_)), b = std::min(starts_[i + 1], hi(rank_));
    if (a < b) slices_.push_back({params_[i], a - starts_[i], b - a, shard_grad(a)});
  }
  for (Param* p : parts_) slices_.push_back({p, 0, p->value.numel(), p->grad.data()});
}

int64_t ShardedState::start_of(const Param* p) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i] == p) return starts_[i];
  H3D_THROW(Error, "parameter " << p->name << " is not one of the sharded parameters");
}

std::vector<int> ShardedState::owned_counts(int64_t a, int64_t b) const {
  std::vector<int> counts(bounds_.size() - 1);
  for (size_t q = 0; q < counts.size(); ++q)
    counts[q] = mpi_count(std::max<int64_t>(0, std::min(b, bounds_[q + 1]) - std::max(a, bounds_[q])));
  return counts;
}

void ShardedState::take_complete_gradients() {
  for (const auto& sl : slices_)
    if (!sl.param->part && sl.param->reduce == GradReduce::kComplete) {
      const float* g = sl.param->grad.data() + sl.offset;
      std::copy(g, g + sl.count, shard_grad(start_of(sl.param) + sl.offset));
    }
}

std::string ShardedState::first_nonfinite(Backend& backend, const Comm& world) const {
  int bad = -1;  // backward meets the last parameter first
  for (const auto& sl : slices_)
    if (!backend.all_finite(sl.grad, sl.count)) bad = std::max(bad, order_.at(sl.param));
  world.allreduce(&bad, 1, ReduceOp::kMax);
  return bad < 0 ? "" : all_[size_t(bad)]->name;
}

void ShardedState::allgather_weights(const Comm& world, int64_t chunk_floats) {
  H3D_CHECK(chunk_floats > 0, "allgather chunk must be positive");
  Tensor buf(grads_.allocator());
  const int64_t n = total();
  size_t first = 0;  // the first parameter that ends after the chunk's start
  for (int64_t c = 0; c < n; c += chunk_floats) {
    const int64_t e = std::min(n, c + chunk_floats);
    buf.reshape_uninit({e - c});
    const int64_t mine_lo = std::max(c, lo(rank_)), mine_hi = std::min(e, hi(rank_));
    while (starts_[first + 1] <= c) ++first;
    // Pack this rank's updated part of the chunk; the allgather fills in the rest; unpack all.
    for (int pass = 0; pass < 2; ++pass) {
      const int64_t a0 = pass == 0 ? mine_lo : c, b0 = pass == 0 ? mine_hi : e;
      for (size_t i = first; i < params_.size() && starts_[i] < b0; ++i) {
        const int64_t a = std::max(a0, starts_[i]), b = std::min(b0, starts_[i + 1]);
        if (a >= b) continue;
        float* w = params_[i]->value.data() + (a - starts_[i]);
        if (pass == 0)
          std::copy(w, w + (b - a), buf.data() + (a - c));
        else
          std::copy(buf.data() + (a - c), buf.data() + (b - c), w);
      }
      if (pass == 0) world.allgatherv_in_place(buf.data(), owned_counts(c, e));
    }
  }
}

OptimizerState ShardedState::gather_state(const Comm& world, const Optimizer& opt) const {
  const OptimizerState mine = opt.state(slices_);
  OptimizerState whole;
  whole.steps = mine.steps;
  const std::vector<std::string> names = opt.slot_names();
  // Before the first update no rank has slots yet (and then none has any).
  if (names.empty() || world.allreduce_sum(int64_t(mine.tensors.empty() ? 0 : 1)) == 0) return whole;
  std::map<std::string, const std::vector<float>*> local;
  for (const auto& t : mine.tensors) local[t.first] = &t.second;
  std::vector<float> zeros, all;
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::vector<int> counts = owned_counts(starts_[i], starts_[i + 1]);
    std::vector<int> displs(counts.size(), 0);
    for (size_t q = 1; q < counts.size(); ++q) displs[q] = displs[q - 1] + counts[q - 1];
    for (const auto& k : names) {
      const std::string name = params_[i]->name + "." + k;
      const auto it = local.find(name);
      const int n = counts[size_t(rank_)];
      H3D_CHECK(n == 0 || (it != local.end() && int64_t(it->second->size()) == n),
                "rank " << rank_ << " holds no " << n << " values of optimizer state " << name);
      zeros.assign(size_t(n), 0.0f);
      all.assign(world.rank() == 0 ? size_t(starts_[i + 1] - starts_[i]) : 0, 0.0f);
      world.gatherv(n > 0 ? it->second->data() : zeros.data(), n, all.data(), counts, displs, 0);
      if (world.rank() == 0) whole.tensors.push_back({name, all});
    }
  }
  return whole;
}

namespace {

// The slots of the parameters held in parts, made whole (gathered over
// world rank 0's spatial group) and added to `whole` on world rank 0.
// Collective over the world.
void add_whole_part_slots(const ProcessGrid& grid, const Optimizer& opt, const std::vector<Param*>& params,
                          OptimizerState& whole) {
  std::vector<Param*> parts;
  for (Param* p : params)
    if (p->part) parts.push_back(p);
  if (parts.empty() || grid.group_index() != 0) return;  // the other groups hold the same parts
  const OptimizerState mine = opt.state(whole_params(parts));
  std::map<std::string, const std::vector<float>*> local;
  for (const auto& t : mine.tensors) local[t.first] = &t.second;
  for (const Param* p : parts)
    for (const auto& k : opt.slot_names()) {
      const std::string name = p->name + "." + k;
      const auto it = local.find(name);
      // Every rank updates its part at the same steps: all have the slot, or none.
      if (it == local.end()) continue;
      std::vector<float> w = gather_whole(grid.group(), *p, it->second->data());
      if (grid.world().rank() == 0) whole.tensors.push_back({name, std::move(w)});
    }
}

}  // namespace

OptimizerState whole_optimizer_state(const ProcessGrid& grid, const Optimizer& opt, const std::vector<Param*>& params,
                                     const ShardedState* shards) {
  OptimizerState whole;
  if (shards) {
    whole = shards->gather_state(grid.world(), opt);
  } else if (grid.world().rank() == 0) {
    std::vector<Param*> flat;
    for (Param* p : params)
      if (!p->part) flat.push_back(p);
    whole = opt.state(whole_params(flat));
  }
  add_whole_part_slots(grid, opt, params, whole);
  return whole;
}

}  // namespace h3d
