// The models: CosmoFlow networks here, unet3d in unet3d.hpp.
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
#pragma once
#include <string>

#include "hybrid3d/models/model_options.hpp"
#include "hybrid3d/models/network.hpp"

namespace h3d {

Network build_model(const ModelOptions& o);
int64_t model_in_channels(const ModelOptions& o);
// The multiple that block bounds of the input should be (2^number of
// stride-2 layers), so that every layer halves the blocks evenly.
int64_t model_alignment(const ModelOptions& o);

}  // namespace h3d
