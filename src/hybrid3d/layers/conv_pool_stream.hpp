// ConvPoolStream: the first layer's convolution (with the leaky ReLU it
// absorbed) and the average or max pooling after it, run slab by slab along
// D, so that the convolution's output never exists whole. That output is
// the largest activation of the CosmoFlow networks (16 or 32 channels at the
// input's full resolution: 1 GiB per rank for cosmoflow-lbann 512^3 on 8
// ranks, 268 MB per sample for cosmoflow 128^3); streamed, a rank holds one
// slab of it (ConvPoolStream::kSlabBytes), which stays in cache between the
// convolution and the pooling instead of going out to memory and back.
//
// Forward, per sample and per slab of the pooling's output planes: the
// convolution computes the rows those outputs' windows read, from the
// input's padded copy, whose halo is the two windows composed (composed());
// rows outside the volume are not computed: the pooling pads them with
// zeros inside its kernel (bitwise as a padded copy), so the slab holds
// only real conv outputs. (At 128^3 its rows are 128 points rather than
// 130; the few-channel kernels step along W in whole vectors, so 130 cost
// them a quarter more forward and an eighth more in backward-weights.)
// The pooling then writes the slab's outputs. In training, for average
// pooling one sign bit per conv output of the slab is kept for the ReLU's
// gradient; for max pooling one byte per pooling output, the place of its
// window's maximum and that maximum's sign (Backend::pool3d_forward_argmax:
// the leaky ReLU is monotonic, so the maximum's sign is its conv output's).
//
// Backward, per slab: the pooling's gradient spread onto the slab's conv
// outputs (the padding's share dropped; for max pooling onto the recorded
// cells), the ReLU's slope where the sign is clear, and the weight (and
// bias) gradient of the slab, added up
// over slabs and samples (fp32, as each slab's own sum is on the backend;
// the few partials add little). Conv rows that two slabs, or two ranks,
// share get from each the share of the pooling outputs it owns: the weight
// gradient is linear in the conv output's gradient, so the sum of these
// partial weight gradients (over slabs here, over ranks in the gradient
// allreduce) is the sum over each row's complete gradient, and no gradient
// halo is sent back. The input's gradient is not computed (the network's
// first layer only).
//
// Only the backend's own kernels run here (conv3d_forward on a slab,
// pool3d_forward/backward or their argmax forms, sign_mask,
// masked_slope_backward, conv3d_backward_weights, copy_box), so every
// backend runs it.
#pragma once
#include <vector>

#include "hybrid3d/backend/backend.hpp"
#include "hybrid3d/core/tensor.hpp"
#include "hybrid3d/parallel/distribution.hpp"

namespace h3d {

class ConvPoolStream {
 public:
  // A slab's conv output holds about Geometry::slab_bytes (this by
  // default), or a sixteenth of the sample's conv output if that is more
  // (fewer slabs: fewer conv rows computed twice where the windows of two
  // slabs overlap), and at least one plane of the pooling's output.
  static constexpr int64_t kSlabBytes = int64_t(32) << 20;
  // What the convolution and pooling of one rank look like (boxes in global
  // coordinates; the same window along each axis).
  struct Geometry {
    int64_t cin = 1, cout = 1;
    Window1D conv, pool;  // conv: stride 1
    PoolKind pool_kind = PoolKind::kAvg;
    bool bias = false;
    float leaky_slope = 0.0f;  // > 0: the absorbed leaky ReLU; 0: none
    Box own_out;               // the pooling's output block of this rank
    Box padded_in;             // the input box the convolution reads (composed window)
    Box conv_volume;           // [0, extent) of the convolution's output
    int64_t slab_bytes = kSlabBytes;  // see kSlabBytes (the tests take one byte)
  };
  // The window of the pooling over the convolution, seen from the input.
  static Window1D composed(const Window1D& conv, const Window1D& pool);

  void plan(const Geometry& g);
  // xp: [n, cin, padded_in]; y: [n, cout, own_out] (written).
  void forward(Backend& be, bool training, int64_t n, const float* xp, const float* w, const float* b, float* y);
  // dy: [n, cout, own_out]; dw, db (may be null) are overwritten with this
  // rank's partial sums. Reads the sign bits of the last training forward.
  void backward(Backend& be, int64_t n, const float* xp, const float* dy, float* dw, float* db);
  void release() { mask_.release(); }
  int64_t slabs() const { return int64_t(slab_out_.size()); }

 private:
  struct Slab {
    Box out;     // its pooling outputs
    Box conv;    // the conv rows their windows read (outside the volume: the pooling's padding)
    Box inside;  // those within the volume: the conv outputs computed
    Box in;      // the input cells those read
    int64_t mask_words = 0;  // of sign bits (average pooling) or argmax bytes (max)
  };
  bool max_pool() const { return g_.pool_kind == PoolKind::kMax; }
  // Whether training keeps records for backward in mask_ (argmax bytes, or
  // the absorbed ReLU's sign bits).
  bool keeps_records() const { return max_pool() || g_.leaky_slope > 0.0f; }
  uint8_t* argmax_at(int64_t sample, int64_t t) { return reinterpret_cast<uint8_t*>(mask_at(sample, t)); }
  Slab slab(int64_t t) const;
  // The slab's buffers, shaped (their capacity is kept from slab to slab).
  void shape_buffers(const Slab& s);
  ConvDesc conv_desc(const Slab& s) const;
  PoolDesc pool_desc(const Slab& s) const;
  // One slab (the whole block) reads the padded input and writes the
  // output where they are; slabs copy their part in and out.
  bool whole_input(const Slab& s) const { return s.in == g_.padded_in; }
  bool whole_output(const Slab& s) const { return s.out == g_.own_out; }
  // One sample's input cells of slab s: xp_sample itself, or their copy in xs_.
  const float* slab_input(Backend& be, const float* xp_sample, const Slab& s);
  uint64_t* mask_at(int64_t sample, int64_t t);

  Geometry g_;
  std::vector<Range> slab_out_;       // pooling output rows (D) of each slab
  std::vector<int64_t> mask_offset_;  // words, per slab, within one sample
  int64_t mask_words_per_sample_ = 0;
  Tensor xs_, cs_, ps_, mask_;  // the slab's input, conv output, pooling output; the sign bits (or argmax bytes)
};

}  // namespace h3d
