#include "hybrid3d/train/network_weights.hpp"

#include <algorithm>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/core/rng.hpp"
#include "hybrid3d/layers/param_part.hpp"
#include "hybrid3d/train/safetensors.hpp"

namespace h3d {

void load_network_weights(Network& net, const std::string& path, const char* flag) {
  auto tensors = load_safetensors(path);
  for (auto* p : net.params()) {
    auto it = tensors.find(p->name);
    H3D_USAGE_CHECK(it != tensors.end(), flag << " '" << path << "' has no tensor '" << p->name << "' for this model");
    H3D_USAGE_CHECK(it->second.shape == p->whole_shape(),
                    flag << " '" << path << "': tensor '" << p->name << "' has the wrong shape for this model (expected "
                         << Tensor(p->whole_shape()).shape_str() << ")");
    take_part(*p, it->second.data.data(), p->value.data());
  }
  for (auto* b : net.buffers()) {
    auto it = tensors.find(b->name);
    if (it != tensors.end() && int64_t(it->second.data.size()) == b->value.numel())
      std::copy(it->second.data.begin(), it->second.data.end(), b->value.data());
  }
}

std::vector<NamedTensor> whole_model_tensors(Network& net, const ProcessGrid& grid, std::vector<Tensor>& wholes) {
  const std::vector<Param*> params = net.params();
  wholes.clear();
  wholes.reserve(params.size());  // the result points into it
  std::vector<NamedTensor> ts;
  for (auto* p : params) {
    if (!p->part) {
      ts.push_back({p->name, &p->value, false});
      continue;
    }
    wholes.emplace_back();
    // The other data groups hold the same parts as world rank 0's.
    if (grid.group_index() == 0) {
      const std::vector<float> w = gather_whole(grid.group(), *p, p->value.data());
      if (!w.empty()) {
        wholes.back().reshape_uninit(p->whole_shape());
        std::copy(w.begin(), w.end(), wholes.back().data());
      }
    }
    ts.push_back({p->name, &wholes.back(), false});
  }
  for (auto* b : net.buffers()) ts.push_back({b->name, &b->value, b->is_integer});
  return ts;
}

void save_network_weights(Network& net, const ProcessGrid& grid, const std::string& path,
                          const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> wholes;
  const std::vector<NamedTensor> ts = whole_model_tensors(net, grid, wholes);
  if (grid.world().rank() == 0) save_safetensors(path, ts, metadata);
}

namespace {

// Throws unless `h` is the same on every rank of `comm`.
void require_same(const Comm& comm, uint64_t h) {
  const double v = double(h >> 12);
  const double mx = comm.allreduce_max(v), mn = -comm.allreduce_max(-v);
  H3D_CHECK(mx == mn, "the ranks' weights differ after training (an internal error: please report it)");
}

}  // namespace

void require_identical_replicas(Network& net, const ProcessGrid& grid) {
  uint64_t whole = kFnvOffset, parts = kFnvOffset;
  for (auto* p : net.params()) {
    uint64_t& h = p->part ? parts : whole;
    h = fnv1a(p->value.data(), size_t(p->value.numel()) * sizeof(float), h);
  }
  require_same(grid.world(), whole);
  require_same(grid.replicas(), parts);
}

}  // namespace h3d
