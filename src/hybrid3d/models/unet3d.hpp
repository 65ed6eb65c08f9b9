// unet3d: the 3D U-Net of the paper's era (Cicek et al. 2016, as in LBANN),
// built as a chain with skip links (layers/skip.hpp). With base width b and
// L levels (defaults 32 and 3):
//   enc{l}, l = 1..L:  [Conv3d k3 p1 -> BatchNorm3d -> ReLU] x 2 with
//                      channels (b 2^(l-1), b 2^l), then MaxPool3d(2)
//                      (the skip link leaves before the pool);
//   bottom:            the same block with (b 2^L, b 2^(L+1));
//   up{l}, l = L..1:   ConvTranspose3d(k2, s2) keeping the channel count,
//                      then cat([up, enc{l} output], 1);
//   dec{l}:            [Conv3d k3 p1 -> BatchNorm3d -> ReLU] x 2 with
//                      (b 2^l, b 2^l);
//   out:               Conv3d k1 with bias to the classes.
// Convolutions followed by batch norm have no bias. Parameter names are the
// equivalent PyTorch module's state_dict names (enc1.conv1.weight,
// enc1.bn1.running_mean, up3.weight [Cin, Cout, 2, 2, 2], dec1.conv2.weight,
// out.bias, ...). The input side must be a multiple of 2^L; block bounds are
// aligned to 2^L so that every pool halves and every upsampling doubles the
// blocks back onto their skip links.
#pragma once
#include <cstdint>

#include "hybrid3d/models/network.hpp"

namespace h3d {

struct UNetOptions {
  int64_t input_size = 64, in_channels = 1, classes = 3, base_channels = 32;
  int levels = 3;
  uint64_t seed = 0;
};

Network build_unet3d(const UNetOptions& o);
inline int64_t unet3d_alignment(const UNetOptions& o) { return int64_t(1) << o.levels; }

}  // namespace h3d
