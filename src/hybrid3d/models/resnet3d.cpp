// "resnet3d": a 3D ResNet-18 for the CosmoFlow task (4 parameters per
// sample): torchvision's resnet18 layout (BasicBlocks [2, 2, 2, 2],
// projection shortcuts) in 3D, with a small stem (k3 stride 1, then a 2x2x2
// pool, instead of k7 stride 2 and a k3 stride 2 pool):
//   conv1 Conv3d(k3, p1, no bias, C -> b) -> bn1 -> ReLU -> MaxPool3d(2)
//   layer1..layer4: two BasicBlocks each, widths b, 2b, 4b, 8b; the first
//     block of layer2..4 has stride 2 and a projection shortcut
//     (downsample.0 Conv3d(k1, s2, no bias) -> downsample.1 BatchNorm3d);
//   BasicBlock: conv1 k3 (stride s) -> bn1 -> ReLU -> conv2 k3 -> bn2,
//     plus the shortcut, then ReLU (layers/residual.hpp);
//   fc: flatten (8b x (S/16)^3) -> 4.
// b is --base-channels (torchvision's 64). Parameter names are the PyTorch
// module's state_dict names (layer2.0.downsample.0.weight, fc.bias, ...);
// tests/reference/test_against_pytorch.py holds one to the other. The input
// side S must be a multiple of 16 (block bounds are aligned to 16).
#include <memory>
#include <string>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/layers/activation.hpp"
#include "hybrid3d/layers/batchnorm3d.hpp"
#include "hybrid3d/layers/conv3d.hpp"
#include "hybrid3d/layers/linear.hpp"
#include "hybrid3d/layers/pool3d.hpp"
#include "hybrid3d/layers/residual.hpp"
#include "hybrid3d/models/registry.hpp"

namespace h3d {

namespace {

void add_basic_block(Network& net, const std::string& name, int64_t cin, int64_t cout, int stride, uint64_t seed) {
  auto link = std::make_shared<SkipLink>();
  net.add(std::make_unique<SkipSource>(name + ".in", link));
  net.add(std::make_unique<Conv3d>(name + ".conv1", Conv3dOptions{cin, cout, 3, stride, Padding::kHalf, false}, seed));
  net.add(std::make_unique<BatchNorm3d>(name + ".bn1", cout));
  net.add(std::make_unique<Activation>(name + ".relu1", ActKind::kRelu));
  net.add(std::make_unique<Conv3d>(name + ".conv2", Conv3dOptions{cout, cout, 3, 1, Padding::kHalf, false}, seed));
  net.add(std::make_unique<BatchNorm3d>(name + ".bn2", cout));
  if (stride != 1 || cin != cout)
    net.add(std::make_unique<ResidualAdd>(name + ".add", link, name + ".downsample", Projection{cin, cout, stride}, seed));
  else
    net.add(std::make_unique<ResidualAdd>(name + ".add", link));
  net.add(std::make_unique<Activation>(name + ".relu2", ActKind::kRelu));
}

Network build_resnet3d(const ModelOptions& o) {
  H3D_USAGE_CHECK(o.input_size >= 16 && o.input_size % 16 == 0 && o.input_size <= 512,
                  "--input-size " << o.input_size << ": resnet3d needs a multiple of 16 up to 512");
  H3D_USAGE_CHECK(o.base_channels >= 1 && o.base_channels <= 128,
                  "--base-channels " << o.base_channels << ": resnet3d takes 1 to 128 (torchvision's is 64)");
  const int64_t b = o.base_channels;
  Network net;
  net.add(std::make_unique<Conv3d>("conv1", Conv3dOptions{o.in_channels, b, 3, 1, Padding::kHalf, false}, o.seed));
  net.add(std::make_unique<BatchNorm3d>("bn1", b));
  net.add(std::make_unique<Activation>("relu", ActKind::kRelu));
  net.add(std::make_unique<Pool3d>("maxpool", PoolKind::kMax, 2, 2, 0));
  int64_t cin = b;
  for (int l = 0; l < 4; ++l) {
    const int64_t cout = b << l;
    const std::string layer = "layer" + std::to_string(l + 1);
    add_basic_block(net, layer + ".0", cin, cout, l == 0 ? 1 : 2, o.seed);
    add_basic_block(net, layer + ".1", cout, cout, 1, o.seed);
    cin = cout;
  }
  const int64_t side = o.input_size / 16;
  net.add(std::make_unique<Linear>("fc", cin * side * side * side, 4, o.seed));
  return net;
}

}  // namespace

void register_resnet3d(ModelRegistry& r) {
  r.add({"resnet3d", ModelTask::kRegression, 4, "3D ResNet-18 (BasicBlocks, batch norm) for the CosmoFlow parameters",
         {"base-channels"}, build_resnet3d});
}

}  // namespace h3d
