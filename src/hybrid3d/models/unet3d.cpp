#include "hybrid3d/models/unet3d.hpp"

#include <memory>
#include <string>
#include <vector>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/layers/activation.hpp"
#include "hybrid3d/layers/batchnorm3d.hpp"
#include "hybrid3d/layers/conv3d.hpp"
#include "hybrid3d/layers/conv_transpose3d.hpp"
#include "hybrid3d/layers/pool3d.hpp"
#include "hybrid3d/layers/skip.hpp"
#include "hybrid3d/models/registry.hpp"

namespace h3d {

namespace {

// [Conv3d k3 p1 (no bias) -> BatchNorm3d -> ReLU] x 2 under the prefix `block`.
void add_double_conv(Network& net, const std::string& block, int64_t cin, int64_t mid, int64_t cout, uint64_t seed) {
  const int64_t widths[2][2] = {{cin, mid}, {mid, cout}};
  for (int j = 0; j < 2; ++j) {
    const std::string id = std::to_string(j + 1);
    net.add(std::make_unique<Conv3d>(block + ".conv" + id,
                                     Conv3dOptions{widths[j][0], widths[j][1], 3, 1, Padding::kHalf, false}, seed));
    net.add(std::make_unique<BatchNorm3d>(block + ".bn" + id, widths[j][1]));
    net.add(std::make_unique<Activation>(block + ".relu" + id, ActKind::kRelu));
  }
}

}  // namespace

Network build_unet3d(const UNetOptions& o) {
  H3D_USAGE_CHECK(o.levels >= 1 && o.levels <= 5, "--levels " << o.levels << " is outside 1..5");
  const int64_t align = unet3d_alignment(o);
  H3D_USAGE_CHECK(o.input_size >= align && o.input_size % align == 0,
                  "--input-size " << o.input_size << ": unet3d with " << o.levels << " levels needs a multiple of "
                                  << align);
  H3D_USAGE_CHECK(o.base_channels >= 1, "--base-channels must be at least 1");
  H3D_USAGE_CHECK(o.classes >= 2, "--classes must be at least 2");
  H3D_USAGE_CHECK(o.in_channels >= 1, "--in-channels must be at least 1");
  Network net;
  const int64_t b = o.base_channels;
  std::vector<std::shared_ptr<SkipLink>> links;
  int64_t cin = o.in_channels;
  for (int l = 1; l <= o.levels; ++l) {
    const std::string enc = "enc" + std::to_string(l);
    const int64_t c1 = b << (l - 1), c2 = b << l;
    add_double_conv(net, enc, cin, c1, c2, o.seed);
    links.push_back(std::make_shared<SkipLink>());
    net.add(std::make_unique<SkipSource>(enc + ".skip", links.back()));
    net.add(std::make_unique<Pool3d>(enc + ".pool", PoolKind::kMax, 2, 2, 0));
    cin = c2;
  }
  const int64_t bottom = b << (o.levels + 1);
  add_double_conv(net, "bottom", cin, b << o.levels, bottom, o.seed);
  cin = bottom;
  for (int l = o.levels; l >= 1; --l) {
    const std::string id = std::to_string(l);
    net.add(std::make_unique<ConvTranspose3d>("up" + id, ConvTranspose3dOptions{cin, cin, 2, 2, 0, 0, true}, o.seed));
    net.add(std::make_unique<SkipConcat>("cat" + id, links[size_t(l - 1)]));
    const int64_t skip = b << l, c = b << l;
    add_double_conv(net, "dec" + id, cin + skip, c, c, o.seed);
    cin = c;
  }
  net.add(std::make_unique<Conv3d>("out", Conv3dOptions{cin, o.classes, 1, 1, Padding::kValid, true}, o.seed));
  return net;
}

void register_unet3d(ModelRegistry& r) {
  r.add({"unet3d", ModelTask::kSegmentation, 1, "3D U-Net (Cicek et al. 2016): base width, levels, classes",
         {"classes", "base-channels", "levels"}, [](const ModelOptions& o) {
           UNetOptions u;
           u.input_size = o.input_size;
           u.in_channels = o.in_channels;
           u.classes = o.classes;
           u.base_channels = o.base_channels;
           u.levels = o.levels;
           u.seed = o.seed;
           return build_unet3d(u);
         }});
}

}  // namespace h3d
