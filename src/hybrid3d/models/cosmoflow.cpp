// The CosmoFlow networks (registered in models/registry.cpp):
//
// "cosmoflow": the MLPerf HPC reference. For input side S (a power of two,
// 32..512) and 4 channels, n = log2(S) - 2 blocks of
//   Conv3d(k, stride 1, 'same', bias) -> [BatchNorm3d] -> LeakyReLU(0.3) -> MaxPool3d(2)
// with min(32 * 2^i, 512) channels, then Flatten -> fc1(->128) -> LeakyReLU(0.3)
// -> Dropout -> fc2(128->64) -> LeakyReLU(0.3) -> Dropout -> fc3(64->4) -> 1.2*tanh.
//
// "cosmoflow-lbann": the network of the paper's era in LBANN, S = 128, 256,
// 512: seven Conv3d(k3, p1, no bias) with 16, 32, 64, 128 (stride 2), 256,
// 256, 256 channels, each followed by LeakyReLU(0.01) [and BatchNorm3d before
// it if asked]; AvgPool3d(3, 2, 1) after conv1..conv5 (and conv6 at 256,
// conv6 and conv7 at 512), so the flatten is 256 * 2^3 = 2048; then
// Dropout -> fc1(2048->2048) -> LeakyReLU -> Dropout -> fc2(2048->256) ->
// LeakyReLU -> Dropout -> fc3(256->4).
#include <string>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/layers/activation.hpp"
#include "hybrid3d/layers/batchnorm3d.hpp"
#include "hybrid3d/layers/conv3d.hpp"
#include "hybrid3d/layers/dropout.hpp"
#include "hybrid3d/layers/linear.hpp"
#include "hybrid3d/layers/pool3d.hpp"
#include "hybrid3d/models/registry.hpp"

namespace h3d {

namespace {

bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }
int log2i(int64_t v) {
  int l = 0;
  while ((int64_t(1) << (l + 1)) <= v) ++l;
  return l;
}

void add_dense_head(Network& net, const ModelOptions& o, const std::vector<int64_t>& widths, float slope,
                    bool dropout_first) {
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    std::string id = std::to_string(i + 1);
    if (o.dropout > 0 && (i > 0 || dropout_first)) net.add(std::make_unique<Dropout>("drop" + id, o.dropout));
    net.add(std::make_unique<Linear>("fc" + id, widths[i], widths[i + 1], o.seed));
    if (i + 2 < widths.size()) net.add(std::make_unique<Activation>("fc_act" + id, ActKind::kLeakyRelu, slope));
  }
}

Network build_cosmoflow(const ModelOptions& o) {
  H3D_USAGE_CHECK(is_pow2(o.input_size) && o.input_size >= 32 && o.input_size <= 512,
                  "--input-size " << o.input_size << ": cosmoflow needs a power of two from 32 to 512");
  H3D_USAGE_CHECK(o.kernel_size >= 1 && o.kernel_size <= 5,
                  "--kernel-size " << o.kernel_size << ": use 1 to 5 (2 is the MLPerf reference, 3 also common)");
  Network net;
  int blocks = log2i(o.input_size) - 2;
  int64_t cin = o.in_channels, side = o.input_size;
  for (int i = 0; i < blocks; ++i) {
    std::string id = std::to_string(i + 1);
    int64_t cout = std::min<int64_t>(int64_t(32) << i, 512);
    net.add(std::make_unique<Conv3d>("conv" + id,
                                     Conv3dOptions{cin, cout, o.kernel_size, 1, Padding::kSame, true}, o.seed));
    if (o.batchnorm) net.add(std::make_unique<BatchNorm3d>("bn" + id, cout));
    net.add(std::make_unique<Activation>("act" + id, ActKind::kLeakyRelu, 0.3f));
    net.add(std::make_unique<Pool3d>("pool" + id, PoolKind::kMax, 2, 2, 0));
    cin = cout;
    side /= 2;
  }
  int64_t flat = cin * side * side * side;
  // Dropout sits after each hidden activation of the head, not before fc1.
  add_dense_head(net, o, {flat, 128, 64, 4}, 0.3f, false);
  net.add(std::make_unique<Activation>("out_tanh", ActKind::kScaledTanh, 1.2f));
  return net;
}

Network build_cosmoflow_lbann(const ModelOptions& o) {
  H3D_USAGE_CHECK(o.input_size == 128 || o.input_size == 256 || o.input_size == 512,
                  "--input-size " << o.input_size << ": cosmoflow-lbann needs 128, 256 or 512");
  Network net;
  const int64_t widths[7] = {16, 32, 64, 128, 256, 256, 256};
  int pools = 5 + (o.input_size >= 256) + (o.input_size >= 512);
  int64_t cin = o.in_channels;
  for (int i = 0; i < 7; ++i) {
    std::string id = std::to_string(i + 1);
    net.add(std::make_unique<Conv3d>(
        "conv" + id, Conv3dOptions{cin, widths[i], 3, i == 3 ? 2 : 1, Padding::kHalf, false}, o.seed));
    if (o.batchnorm) net.add(std::make_unique<BatchNorm3d>("bn" + id, widths[i]));
    net.add(std::make_unique<Activation>("act" + id, ActKind::kLeakyRelu, 0.01f));
    if (i < pools) net.add(std::make_unique<Pool3d>("pool" + id, PoolKind::kAvg, 3, 2, 1));
    cin = widths[i];
  }
  add_dense_head(net, o, {2048, 2048, 256, 4}, 0.01f, true);
  return net;
}

}  // namespace

void register_cosmoflow_models(ModelRegistry& r) {
  r.add({"cosmoflow", ModelTask::kRegression, 4, "the MLPerf HPC CosmoFlow reference network (input side 32..512)",
         {"kernel-size", "batchnorm", "dropout"}, build_cosmoflow});
  r.add({"cosmoflow-lbann", ModelTask::kRegression, 4, "the LBANN CosmoFlow network of the paper (128, 256, 512)",
         {"batchnorm", "dropout"}, build_cosmoflow_lbann});
}

}  // namespace h3d
