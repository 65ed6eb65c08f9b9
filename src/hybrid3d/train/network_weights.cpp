#include "hybrid3d/train/network_weights.hpp"

#include <algorithm>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/core/rng.hpp"
#include "hybrid3d/train/safetensors.hpp"

namespace h3d {

void load_network_weights(Network& net, const std::string& path, const char* flag) {
  auto tensors = load_safetensors(path);
  for (auto* p : net.params()) {
    auto it = tensors.find(p->name);
    H3D_USAGE_CHECK(it != tensors.end(), flag << " '" << path << "' has no tensor '" << p->name << "' for this model");
    H3D_USAGE_CHECK(it->second.shape == p->value.shape(),
                    flag << " '" << path << "': tensor '" << p->name << "' has the wrong shape for this model (expected "
                         << p->value.shape_str() << ")");
    std::copy(it->second.data.begin(), it->second.data.end(), p->value.data());
  }
  for (auto* b : net.buffers()) {
    auto it = tensors.find(b->name);
    if (it != tensors.end() && int64_t(it->second.data.size()) == b->value.numel())
      std::copy(it->second.data.begin(), it->second.data.end(), b->value.data());
  }
}

void save_network_weights(Network& net, const std::string& path, const std::map<std::string, std::string>& metadata) {
  std::vector<NamedTensor> ts;
  for (auto* p : net.params()) ts.push_back({p->name, &p->value, false});
  for (auto* b : net.buffers()) ts.push_back({b->name, &b->value, b->is_integer});
  save_safetensors(path, ts, metadata);
}

void require_identical_replicas(Network& net, const Comm& world) {
  uint64_t h = kFnvOffset;
  for (auto* p : net.params()) h = fnv1a(p->value.data(), size_t(p->value.numel()) * sizeof(float), h);
  const double v = double(h >> 12);
  const double mx = world.allreduce_max(v), mn = -world.allreduce_max(-v);
  H3D_CHECK(mx == mn, "the ranks' weights differ after training (an internal error: please report it)");
}

}  // namespace h3d
