// Backward weights of a convolution whose input has few channels (the
// first layer of every network here: 4 channels, or 1 for a CT scan), as
// im2col + gemm on chunks of output rows.
//
// oneDNN's direct kernels block the input channels by 8 or 16, so 4
// channels waste half to three quarters of every vector, and for this
// shape 2.6 picks an AVX2 kernel even on AVX-512: cosmoflow's conv1
// (4 -> 32, k = 2) ran its weight gradient at 28 GFLOP/s against 120-270
// for the other layers. Here the reduction is over the output points and
// the product is small: dW[cout][cin * k^3] = dY[cout][points] x
// cols[cin * k^3][points]^T, so the input channels and the kernel window
// together form one long enough dimension.
#pragma once
#include <cstdint>
#include <vector>

#include "hybrid3d/backend/backend.hpp"

namespace h3d {

// Whether d takes this path (a few input channels, a small window).
bool few_channel_weights_apply(const ConvDesc& d);

// dw (OIDHW) and db (may be null) overwritten, as
// Backend::conv3d_backward_weights. Each chunk of at most kChunkPoints output
// points (whole rows of one sample) is reduced in fp32 by one thread's
// gemm, and the chunks' partial sums are added in double in chunk order:
// the bits do not depend on the thread count, and no fp32 chain is longer
// than a chunk (see cpu_conv.cpp on why that matters).
void few_channel_backward_weights(const ConvDesc& d, const float* x, const float* dy, float* dw, float* db);

// What few_channel_backward_weights takes from the pool while it runs (floats
// each, all held together), with OpenMP's current thread count.
std::vector<int64_t> few_channel_weights_staging(const ConvDesc& d);

}  // namespace h3d
