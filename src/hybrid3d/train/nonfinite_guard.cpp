#include "hybrid3d/train/nonfinite_guard.hpp"

#include <cmath>

namespace h3d {

std::string first_nonfinite_gradient(const Network& net, Backend& backend, const Comm& world) {
  // The ranks hold different parts of some parameters (Param::part): the
  // first bad one on any rank, in backward order, counts for all.
  const auto& layers = net.layers();
  std::vector<const Param*> order;  // backward order
  for (size_t l = layers.size(); l-- > 0;)
    for (auto* p : layers[l]->params()) order.push_back(p);
  int first = int(order.size());
  for (size_t i = 0; i < order.size(); ++i)
    if (!backend.all_finite(order[i]->grad.data(), order[i]->grad.numel())) {
      first = int(i);
      break;
    }
  first = world.allreduce_min(first);
  return first == int(order.size()) ? "" : order[size_t(first)]->name;
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
