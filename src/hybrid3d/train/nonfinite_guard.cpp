#include "hybrid3d/train/nonfinite_guard.hpp"

#include <cmath>

namespace h3d {

std::string first_nonfinite_gradient(const Network& net, Backend& backend) {
  const auto& layers = net.layers();
  for (size_t l = layers.size(); l-- > 0;)
    for (auto* p : layers[l]->params())
      if (!backend.all_finite(p->grad.data(), p->grad.numel())) return p->name;
  return "";
}

std::string where_nonfinite(Network& net, const StepContext& step, Tensor x, const Comm& world) {
  StepContext ctx = step;
  const int64_t none = int64_t(net.layers().size());
  int64_t first = none;
  net.forward(ctx, std::move(x), [&](int64_t layer, const Tensor& out) {
    if (first == none && !ctx.backend->all_finite(out.data(), out.numel())) first = layer;
  });
  first = -int64_t(world.allreduce_max(-double(first)));
  if (first == none) return "every layer's output is finite, so the loss itself overflowed";
  if (first < 0) return "the input data of this step is not finite (check the files and --transform)";
  return "the first non-finite values are in the output of layer '" + net.layers()[size_t(first)]->name() + "'";
}

}  // namespace h3d
