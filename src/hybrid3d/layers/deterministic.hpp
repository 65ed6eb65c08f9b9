// --deterministic: training that gives bitwise the same weights, buffers
// and losses under every layout the network accepts.
//
// Two things make a distributed result depend on the layout, and this mode
// removes both:
//  - sums over space or samples (weight and bias gradients, batch-norm
//    statistics, the partial products of a linear layer on a spatial input,
//    the loss) formed per block and then combined: here each is formed on
//    pieces that are the same under every layout, one sample and one fixed
//    global tile at a time, and the pieces are added exactly (ExactSum), so
//    neither the grouping nor the reduction tree shows in the bits;
//  - the input gradient of a window op assembled by adding halo
//    contributions back to their owners: here each rank gathers the output
//    gradient of every output that reads its block and computes its cells
//    in one kernel call (OwnInputGrad).
// The tiles are the model's alignment cells (blocks are unions of them, so
// a layout whose bounds are not multiples of the alignment is refused),
// mapped through the layers like the blocks. Per-voxel kernels (the forward
// convolution, activations, the optimizer) compute each output in an order
// that does not depend on the block.
#pragma once
#include <string>
#include <vector>

#include "hybrid3d/parallel/exact_sum.hpp"
#include "hybrid3d/parallel/halo_exchange.hpp"
#include "hybrid3d/layers/layer.hpp"

namespace h3d {

// Makes `in` deterministic, with tiles of `align` voxels per dimension.
void use_deterministic_tiles(ActShape& in, int64_t align);
// UsageError naming `layer` unless every block of s is a union of tiles.
void require_blocks_on_tiles(const ActShape& s, const std::string& layer);
// The tiles inside this rank's block, in local (block) coordinates.
std::vector<Box> local_tiles(const ActShape& s, int spatial_rank);

// A convolution's weight (and bias) gradient, exactly summed over every
// sample and every tile of the output of every rank of `world`. d is the
// rank's whole convolution (zero padding: xp is the padded input); tiles
// are local output boxes. dw and db (may be null) get the global values.
// `w_sum` is the layer's, kept between steps so that its 16 bytes per
// weight are not allocated again each time.
void exact_conv_weight_grad(Backend& backend, const Comm& world, const ConvDesc& d, const float* xp,
                            const float* dy, const std::vector<Box>& tiles, ExactSum& w_sum, float* dw, float* db);

// sums.add(c, sum of f(i) over the cells i of the tile) for each sample,
// tile and channel c of an [n, channels, ext] tensor; f gets the flat index
// and the tile's sum runs in double, in a fixed order.
template <typename F>
void add_tile_sums(int64_t n, int64_t channels, const std::array<int64_t, 3>& ext, const std::vector<Box>& tiles,
                   ExactSum& sums, F f) {
  const int64_t vol = ext[0] * ext[1] * ext[2];
  for (int64_t s = 0; s < n; ++s)
    for (const Box& t : tiles)
      for (int64_t c = 0; c < channels; ++c) {
        double part = 0;
        const int64_t base = (s * channels + c) * vol;
        for (int64_t z = t.r[0].lo; z < t.r[0].hi; ++z)
          for (int64_t y = t.r[1].lo; y < t.r[1].hi; ++y) {
            const int64_t row = base + (z * ext[1] + y) * ext[2];
            for (int64_t x = t.r[2].lo; x < t.r[2].hi; ++x) part += f(c, row + x);
          }
        sums.add(c, part);
      }
}

// Per-channel sums of dy over every sample and tile, exactly over `world`.
void exact_channel_sums(const Comm& world, const float* dy, int64_t n, int64_t channels,
                        const std::array<int64_t, 3>& ext, const std::vector<Box>& tiles, float* out);

// The input gradient of a window op on the rank's own block, from the
// output gradient of every output whose window reads the block (gathered
// from the neighbours), in one kernel call. The kernel sees the own block
// as its input, the gathered outputs as its output, and the padding in
// between (which may be real cells of other blocks: their share is dropped).
class OwnInputGrad {
 public:
  // UsageError naming `layer` if some block is read by no output, or its
  // last cells by none (a stride that skips cells).
  void plan(const Distribution& in, const Window3D& w, const Distribution& out, int spatial_rank,
            const std::string& layer);
  // dy over the gathered outputs ([N, C, outputs]); dy itself when the
  // block's outputs are all that read it.
  const Tensor& gather(const StepContext& ctx, const Tensor& dy);
  void release() { dyp_.release(); }
  // The kernel call's geometry, put into a convolution or pooling desc.
  template <typename Desc>
  Desc geometry(Desc d) const {
    d.in = in_ext_;
    d.out = out_ext_;
    d.pad_lo = pad_lo_;
    d.pad_hi = pad_hi_;
    return d;
  }

 private:
  HaloExchange halo_;
  Tensor dyp_;
  std::array<int64_t, 3> in_ext_{}, out_ext_{};
  std::array<int, 3> pad_lo_{}, pad_hi_{};
};

}  // namespace h3d
