// The models hybrid3d builds, by --model name: each model's file registers
// its entry (register_* below, one line in registry.cpp), and everything
// else asks the registry: the builder, the task, the default input
// channels, the options it reads. Adding a model: write models/NAME.cpp
// with its builder and register_NAME, add the line in registry.cpp, list
// it in CMakeLists.txt (docs/architecture.md, "Adding a model").
#pragma once
#include <array>
#include <functional>
#include <string>
#include <vector>

#include "hybrid3d/models/model_options.hpp"
#include "hybrid3d/models/network.hpp"

namespace h3d {

enum class ModelTask { kRegression, kSegmentation };

struct ModelEntry {
  std::string name;
  ModelTask task = ModelTask::kRegression;
  int64_t in_channels = 4;  // --in-channels when not given
  std::string description;  // one line
  // The ModelOptions it reads besides model, input_size, in_channels and
  // seed (flag names: "kernel-size", "batchnorm", ...).
  std::vector<std::string> reads;
  // Builds the network; o.in_channels is already resolved. UsageError for
  // options it cannot build (naming the flag and what would work).
  std::function<Network(const ModelOptions& o)> build;
};

class ModelRegistry {
 public:
  // Every model, registered on first use.
  static const ModelRegistry& instance();
  void add(ModelEntry e);
  // UsageError naming the registered models for an unknown name.
  const ModelEntry& find(const std::string& name) const;
  std::vector<std::string> names() const;  // in registration order

 private:
  std::vector<ModelEntry> entries_;
};

// Each model family's registration (in its own file).
void register_cosmoflow_models(ModelRegistry& r);  // cosmoflow, cosmoflow-lbann
void register_resnet3d(ModelRegistry& r);
void register_unet3d(ModelRegistry& r);

// Whether the model segments (a class score per voxel) rather than regresses.
bool is_segmentation(const ModelOptions& o);
int64_t model_in_channels(const ModelOptions& o);
// The network of `o` (not yet set up).
Network build_model(const ModelOptions& o);
// The network of `o` set up for samples of `extent` under `grid`: its
// input split into balanced blocks at the network's alignment (whole
// deterministic tiles with `deterministic`), every layer checked against
// the layout. net.input_shape() is then the input each rank gets.
Network build_model_for(const ModelOptions& o, const std::array<int64_t, 3>& extent, const ProcessGrid& grid,
                        bool deterministic = false);

}  // namespace h3d
