#include "hybrid3d/layers/layer.hpp"

#include <cmath>

#include "hybrid3d/core/rng.hpp"

namespace h3d {

std::vector<int64_t> ActShape::local_shape(int64_t n, int spatial_rank) const {
  if (!spatial) return {n, features};
  auto e = dist.box(spatial_rank).extents();
  return {n, channels, e[0], e[1], e[2]};
}

ActShape ActShape::through(const Window3D& w, const std::string& layer) const {
  ActShape out = *this;
  out.dist = dist.through(w, layer);
  if (deterministic) out.tiles = tiles.through(w, layer + " (its --deterministic tiles)");
  return out;
}

void init_uniform_fan_in(Tensor& t, int64_t fan_in, uint64_t seed, const std::string& name) {
  double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  uint64_t stream = fnv1a(name);
  for (int64_t i = 0; i < t.numel(); ++i)
    t[i] = static_cast<float>((2.0 * uniform01(seed, stream, uint64_t(i)) - 1.0) * bound);
}

void make_weight_and_bias(const std::string& layer, std::vector<int64_t> shape, int64_t fan_in, uint64_t seed,
                          Param& weight, Param* bias, int64_t bias_size) {
  weight.name = layer + ".weight";
  weight.value.resize(std::move(shape));
  init_uniform_fan_in(weight.value, fan_in, seed, weight.name);
  weight.grad.resize(weight.value.shape());
  if (!bias) return;
  bias->name = layer + ".bias";
  bias->value.resize({bias_size});
  init_uniform_fan_in(bias->value, fan_in, seed, bias->name);
  bias->grad.resize({bias_size});
}

}  // namespace h3d
