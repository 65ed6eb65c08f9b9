// Direct AVX-512 kernels for convolutions with few input channels (the
// first layer: 4 channels of a universe, 1 of a CT volume; and the
// backward-weights of layers of up to 16), stride 1, on the plain NCDHW
// buffers the engine keeps.
//
// Why not oneDNN: its JIT kernels for these shapes want blocked layouts
// (nCdhw16c output for forward, channels-last for backward-weights), and
// the reorders to and from them cost as much as the convolutions
// themselves. Cosmoflow's conv1 at 128^3 (4 -> 32, k2) took 73 ms forward,
// of which 56 ms reordered the 268 MB output out of nCdhw16c, and 90 ms
// backward-weights, of which 43 ms staged dy and x into channels-last
// (ONEDNN_VERBOSE, 1 rank x 2 threads). These kernels read and write the
// plain buffers where they are: the taps (channel x window cell) are the
// reduction, as one short dot product per output point (forward) or one
// long one per weight (backward-weights), vectorised along W.
//
// Bit-for-bit properties the engine relies on, as the oneDNN path has them:
// - forward: each output point is bias + its taps in (ci, kd, kh, kw) order,
//   one fused multiply-add each, whatever the region, the extents or the
//   thread count (a region equals the whole; the halo overlap needs that);
//   a fused leaky ReLU is applied as activation_forward computes it;
// - backward-weights: per output plane (one sample, one D index) a float
//   sum in fixed order, then the planes summed in double in plane order, so
//   the result does not depend on the thread count.
#pragma once
#include <cstdint>

#include "hybrid3d/backend/backend.hpp"

namespace h3d {

// True when the CPU has AVX-512 and d is a stride-1 convolution without
// padding of its own (the layers pass a padded copy) with at most
// kFewChannelMaxInputs input channels: forward runs here.
bool few_channel_conv_applies(const ConvDesc& d);
constexpr int64_t kFewChannelMaxInputs = 4;
// The same with at most kFewChannelWeightsMaxInputs: backward-weights runs
// here. Its tiles of 4 output channels x 4 taps keep their pace as the taps
// grow, while oneDNN's staging of x and dy into its layouts does not
// shrink: cosmoflow-lbann's conv2 (16 -> 32, k3, 64^3) runs at 162 here
// against 118 GFLOP/s through oneDNN (bench/conv_kernels, 2 threads). At 32
// input channels oneDNN wins (its conv3, 32 -> 64: 156 against 115).
bool few_channel_weights_apply(const ConvDesc& d);
constexpr int64_t kFewChannelWeightsMaxInputs = 16;

// The outputs of `region` (local output indices) of y (d's full output
// extents); the rest of y is left alone.
void few_channel_conv_forward(const ConvDesc& d, const float* x, const float* w, const float* b, float* y,
                              const Box& region);

// Floats of the per-plane partial sums backward-weights needs.
int64_t few_channel_conv_partial_floats(const ConvDesc& d);
// dw (OIDHW) and db (may be null) overwritten; `partials` holds
// few_channel_conv_partial_floats(d) floats.
void few_channel_conv_backward_weights(const ConvDesc& d, const float* x, const float* dy, float* dw, float* db,
                                       float* partials);

}  // namespace h3d
