// The model registry (models/registry.hpp) and Network::alignment(): every
// registered model is found by name with its task and default channels, an
// unknown name lists the known ones, and the alignment the layers' strides
// give equals the block multiple each model needs (the formulas the
// builders were written for: S/4 for cosmoflow, 2^(pools + 1) for
// cosmoflow-lbann, 2^levels for unet3d).
#include <gtest/gtest.h>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/models/registry.hpp"

using namespace h3d;

TEST(ModelRegistry, FindsEveryModelWithItsTaskAndChannels) {
  const auto& r = ModelRegistry::instance();
  ASSERT_EQ(r.names(), (std::vector<std::string>{"cosmoflow", "cosmoflow-lbann", "resnet3d", "unet3d"}));
  ModelOptions o;
  for (const std::string name : {"cosmoflow", "cosmoflow-lbann", "resnet3d"}) {
    o.model = name;
    EXPECT_FALSE(is_segmentation(o)) << name;
    EXPECT_EQ(model_in_channels(o), 4) << name;
  }
  o.model = "unet3d";
  EXPECT_TRUE(is_segmentation(o));
  EXPECT_EQ(model_in_channels(o), 1);
  o.in_channels = 3;
  EXPECT_EQ(model_in_channels(o), 3);
  for (const auto& name : r.names()) EXPECT_FALSE(r.find(name).description.empty()) << name;
}

TEST(ModelRegistry, UnknownNameListsTheKnownOnes) {
  ModelOptions o;
  o.model = "resnet-9000";
  try {
    build_model(o);
    ADD_FAILURE() << "built an unknown model";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("use cosmoflow, cosmoflow-lbann, resnet3d, unet3d"), std::string::npos) << e.what();
  }
  EXPECT_THROW(is_segmentation(o), UsageError);
}

TEST(NetworkAlignment, FromTheLayersStrides) {
  int checked = 0;
  ModelOptions o;
  o.model = "cosmoflow";
  for (int64_t s : {32, 64, 128, 256, 512}) {
    o.input_size = s;
    EXPECT_EQ(build_model(o).alignment(), s / 4) << "cosmoflow " << s;
    ++checked;
  }
  o.model = "cosmoflow-lbann";
  for (int64_t s : {128, 256, 512}) {
    o.input_size = s;
    const int pools = 5 + (s >= 256) + (s >= 512);
    EXPECT_EQ(build_model(o).alignment(), int64_t(1) << (pools + 1)) << "cosmoflow-lbann " << s;
    ++checked;
  }
  o.model = "resnet3d";
  o.base_channels = 2;
  for (int64_t s : {16, 32, 64}) {  // the stem's pool and three stride-2 stages
    o.input_size = s;
    EXPECT_EQ(build_model(o).alignment(), 16) << "resnet3d " << s;
    ++checked;
  }
  o.model = "unet3d";
  for (int levels : {1, 2, 3, 4}) {
    o.levels = levels;
    o.input_size = int64_t(16) << levels;
    EXPECT_EQ(build_model(o).alignment(), int64_t(1) << levels) << "unet3d " << levels << " levels";
    ++checked;
  }
  EXPECT_EQ(checked, 15);
}
