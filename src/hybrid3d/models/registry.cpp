#include "hybrid3d/models/registry.hpp"

#include <sstream>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/layers/deterministic.hpp"

namespace h3d {

const ModelRegistry& ModelRegistry::instance() {
  static const ModelRegistry registry = [] {
    ModelRegistry r;
    register_cosmoflow_models(r);
    register_resnet3d(r);
    register_unet3d(r);
    return r;
  }();
  return registry;
}

void ModelRegistry::add(ModelEntry e) {
  for (const auto& have : entries_) H3D_CHECK(have.name != e.name, "model '" << e.name << "' is registered twice");
  H3D_CHECK(e.build && !e.name.empty(), "model '" << e.name << "' is registered without a builder");
  entries_.push_back(std::move(e));
}

const ModelEntry& ModelRegistry::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return e;
  std::ostringstream known;
  for (size_t i = 0; i < entries_.size(); ++i) known << (i ? ", " : "") << entries_[i].name;
  H3D_THROW(UsageError, "--model '" << name << "' is unknown; use " << known.str());
}

std::vector<std::string> ModelRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& e : entries_) out.push_back(e.name);
  return out;
}

bool is_segmentation(const ModelOptions& o) {
  return ModelRegistry::instance().find(o.model).task == ModelTask::kSegmentation;
}

int64_t model_in_channels(const ModelOptions& o) {
  return o.in_channels > 0 ? o.in_channels : ModelRegistry::instance().find(o.model).in_channels;
}

Network build_model(const ModelOptions& given) {
  H3D_USAGE_CHECK(given.in_channels >= 0, "--in-channels must be at least 1");
  const ModelEntry& e = ModelRegistry::instance().find(given.model);
  ModelOptions o = given;
  o.in_channels = model_in_channels(given);
  return e.build(o);
}

Network build_model_for(const ModelOptions& o, const std::array<int64_t, 3>& extent, const ProcessGrid& grid,
                        bool deterministic) {
  Network net = build_model(o);
  ActShape in;
  in.channels = model_in_channels(o);
  in.dist = Distribution::balanced(extent, grid.spatial(), net.alignment());
  in.dist.require_nonempty("input");
  if (deterministic) use_deterministic_tiles(in, net.alignment());
  net.setup(in, grid);
  return net;
}

}  // namespace h3d
