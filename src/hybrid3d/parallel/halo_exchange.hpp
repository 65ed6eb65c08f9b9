// HaloExchange: fills a rank's padded input box for a window op from the
// blocks of its neighbours, and (in reverse) sends the gradient of those halo
// cells back to their owners to be added.
//
// The plan is built once per (input distribution, window, output
// distribution) by intersecting boxes, so it covers faces, edges and corners
// when several dimensions are split, uneven blocks, and halos wider than a
// neighbour's block (they then come from several ranks). Outside the global
// volume the padded box holds `pad_value` (0 for conv and average pooling,
// -inf for max pooling).
//
// The cells are moved by the BoxKernels each call is handed (the backend
// whose tensors these are), so the exchange never touches memory itself.
//
// start() posts receives before sends and copies the rank's own cells; the
// caller may compute on its interior (early_box()) before finish() waits and
// unpacks. Profile: halo.exposed counts the messaging (packing, posting,
// waiting, unpacking), not the moves of the own cells into the padded
// layout, which a single rank pays as well; the caller times the span
// from start to finish as halo.total.
#pragma once
#include <functional>
#include <vector>

#include "hybrid3d/core/box.hpp"
#include "hybrid3d/core/box_kernels.hpp"
#include "hybrid3d/core/tensor.hpp"
#include "hybrid3d/parallel/comm.hpp"
#include "hybrid3d/parallel/distribution.hpp"

namespace h3d {

class HaloExchange {
 public:
  HaloExchange() = default;
  HaloExchange(const Distribution& in, const Window3D& w, const Distribution& out, int spatial_rank,
               float pad_value);
  // The general plan: rank q of the group needs the box needed(q) (global
  // coordinates; what lies outside the volume is padding) of a tensor cut
  // into the blocks of `from`.
  HaloExchange(const Distribution& from, const std::function<Box(int)>& needed, int spatial_rank, float pad_value);

  const Box& own_box() const { return own_; }
  const Box& padded_box() const { return padded_; }
  // True when the padded box is the own box: no halo, no padding, no messages.
  bool trivial() const { return trivial_; }
  int64_t halo_messages() const { return static_cast<int64_t>(recv_.size() + send_.size()); }
  // The part of the padded box whose cells are final once start() returns
  // (the own cells and the padding outside the global volume): everything
  // except what the neighbours send.
  Box early_box() const;

  // Forward: x is [N, C, own], xp becomes [N, C, padded].
  void start(const Comm& group, BoxKernels& k, const Tensor& x, Tensor& xp);
  // The same, with x's storage becoming xp's: the own cells move in place to
  // their padded positions, so no second copy of the block exists. Returns
  // false (x untouched) when x's capacity cannot hold the padded box; the
  // caller then uses start().
  bool start_in_place(const Comm& group, BoxKernels& k, Tensor& x, Tensor& xp);
  void finish(BoxKernels& k, Tensor& xp);
  // Backward: dxp is [N, C, padded] and is consumed (its storage becomes
  // dx's where possible); dx becomes [N, C, own] with the halo contributions
  // of the neighbours added (in a fixed order: deterministic).
  void reverse_start(const Comm& group, BoxKernels& k, Tensor& dxp, Tensor& dx);
  // Floats a tensor needs to be grown in place into the padded box.
  int64_t padded_floats(int64_t nc) const { return nc * padded_.volume(); }
  void reverse_finish(BoxKernels& k, Tensor& dx);

 private:
  struct Region {
    int peer;
    Box box;
    Tensor buf;  // [nc * box volume]
  };
  void post(const Comm& group, BoxKernels& k, std::vector<Region>& incoming, std::vector<Region>& outgoing, const Tensor& src,
            const Box& src_origin, int tag);
  void wait_all();

  Box own_, padded_, local_;  // local_: needed cells this rank owns itself
  float pad_value_ = 0.0f;
  bool trivial_ = true;
  std::vector<Region> recv_, send_;  // forward direction; reversed in backward
  Requests reqs_;
};

}  // namespace h3d
