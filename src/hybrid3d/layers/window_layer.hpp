// Shared plumbing of the window layers (conv, pool): the halo-padded input.
//
// The rank computes exactly the outputs it owns from a padded copy of its
// input box (own cells + halo from neighbours + global-edge padding), so the
// kernel itself always runs with zero padding. When no halo or padding is
// needed the input is used as it is.
#pragma once
#include <vector>

#include "hybrid3d/core/profiler.hpp"
#include "hybrid3d/parallel/halo_exchange.hpp"
#include "hybrid3d/layers/layer.hpp"

namespace h3d {

enum class Padding { kValid, kHalf, kSame };  // 0; k/2 on both sides; TF/PyTorch 'same'
Padding parse_padding(const std::string& s);
Window1D make_window(int k, int stride, Padding p);

class PaddedInput {
 public:
  void plan(const Distribution& in, const Window3D& w, const Distribution& out, int spatial_rank, float pad_value) {
    halo_ = HaloExchange(in, w, out, spatial_rank, pad_value);
    window_ = w;
    out_ext_ = out.box(spatial_rank).extents();
  }
  // No halo and no padding: the kernel reads x itself.
  bool trivial() const { return halo_.trivial(); }
  // Padding at the global edge and no halo from neighbours: a kernel that
  // pads by itself may read x (padding_lo/hi() cells on each side). Not
  // where the windows leave the block's last cells unread (a 2^3 stride-2
  // pooling of an odd extent): the padded box is then cut, not padded.
  bool padding_only() const {
    return !halo_.trivial() && halo_.halo_messages() == 0 && halo_.padded_box().contains(halo_.own_box());
  }
  std::array<int, 3> padding_lo() const { return side(true); }
  std::array<int, 3> padding_hi() const { return side(false); }
  // Returns the tensor the kernel reads: x itself, or the padded copy.
  const Tensor& gather(const StepContext& ctx, const Tensor& x) {
    if (halo_.trivial()) return x;
    ProfileScope timed(total_name());
    halo_.start(ctx.grid->group(), *ctx.backend, x, padded_);
    halo_.finish(*ctx.backend, padded_);
    return padded_;
  }
  // The same when x is not needed afterwards: the padded copy is grown in
  // x's own buffer when it has the capacity (see input_capacity()).
  const Tensor& gather_consuming(const StepContext& ctx, Tensor& x) {
    if (halo_.trivial()) return x;
    ProfileScope timed(total_name());
    start_consuming(ctx, x);
    halo_.finish(*ctx.backend, padded_);
    return padded_;
  }
  // Gather with the halo in flight: compute(xp, region) is called for the
  // outputs (local indices) whose windows need no halo cell while the
  // messages travel, then, once they arrived, for each remaining box of the
  // output (at most six: the faces of the interior). Returns xp. With
  // `consumable` (x itself), x is consumed as in gather_consuming.
  template <typename Compute>
  const Tensor& gather_overlapped(const StepContext& ctx, const Tensor& x, Tensor* consumable, Compute compute) {
    const Box all = output_box();
    if (halo_.trivial()) {
      compute(x, all);
      return x;
    }
    const Box inner = interior_outputs();
    {
      ProfileScope timed(total_name());
      if (consumable)
        start_consuming(ctx, *consumable);
      else
        halo_.start(ctx.grid->group(), *ctx.backend, x, padded_);
      if (!inner.empty()) compute(padded_, inner);
      halo_.finish(*ctx.backend, padded_);
    }
    for (const Box& b : around(all, inner)) compute(padded_, b);
    return padded_;
  }
  const Tensor& saved(const Tensor& x) const { return halo_.trivial() ? x : padded_; }
  // kernel(out) writes the gradient w.r.t. the tensor the forward kernel
  // read (x itself, or the padded copy); the halo part of it is then sent
  // back to its owners and added into dx. The padded copy is freed after
  // the kernel ran (release() it before to let the gradient reuse its buffer).
  // `meanwhile()` runs while the halo gradient travels (a convolution's
  // weight gradient: it reads the padded copy, which is freed after it).
  template <typename Kernel, typename Meanwhile>
  void input_grad(const StepContext& ctx, const std::vector<int64_t>& x_shape, Tensor& dx, Kernel kernel,
                  Meanwhile meanwhile) {
    if (halo_.trivial()) {
      dx.reshape_uninit(x_shape);
      kernel(dx.data());
      meanwhile();
      return;
    }
    auto e = halo_.padded_box().extents();
    Tensor grad(ctx.backend->allocator());  // the kernel writes every cell
    grad.reshape_uninit({x_shape[0], x_shape[1], e[0], e[1], e[2]});
    kernel(grad.data());
    ProfileScope timed(total_name());
    halo_.reverse_start(ctx.grid->group(), *ctx.backend, grad, dx);
    meanwhile();
    padded_.release();
    halo_.reverse_finish(*ctx.backend, dx);
  }
  template <typename Kernel>
  void input_grad(const StepContext& ctx, const std::vector<int64_t>& x_shape, Tensor& dx, Kernel kernel) {
    input_grad(ctx, x_shape, dx, kernel, [] {});
  }
  // Capacity (floats) an input of n x c should have for gather_consuming.
  int64_t input_capacity(int64_t nc) const { return halo_.trivial() ? 0 : halo_.padded_floats(nc); }
  // The rank's outputs, in local indices.
  Box output_box() const { return Box{{Range{0, out_ext_[0]}, Range{0, out_ext_[1]}, Range{0, out_ext_[2]}}}; }
  // The outputs (local indices) computable from halo_.early_box().
  Box interior_outputs() const;
  // `all` minus `inner` (inside it) as at most six disjoint boxes.
  static std::vector<Box> around(const Box& all, const Box& inner);
  std::array<int64_t, 3> padded_extents() const { return halo_.padded_box().extents(); }
  // The cells the kernel reads (global coordinates; may reach outside the volume).
  const Box& padded_box() const { return halo_.padded_box(); }
  void release() { padded_.release(); }

 private:
  std::array<int, 3> side(bool lo) const {
    std::array<int, 3> out{};
    const Box &own = halo_.own_box(), &padded = halo_.padded_box();
    for (int d = 0; d < 3; ++d) out[size_t(d)] = int(lo ? own.r[d].lo - padded.r[d].lo : padded.r[d].hi - own.r[d].hi);
    return out;
  }
  // halo.total counts only exchanges with messages (not a single rank's padding).
  const char* total_name() const { return halo_.halo_messages() > 0 ? prof::kHaloTotal : nullptr; }
  void start_consuming(const StepContext& ctx, Tensor& x) {
    if (!halo_.start_in_place(ctx.grid->group(), *ctx.backend, x, padded_)) {
      halo_.start(ctx.grid->group(), *ctx.backend, x, padded_);
      x.release();
    }
  }
  HaloExchange halo_;
  Window3D window_{};
  std::array<int64_t, 3> out_ext_{};
  Tensor padded_;
};

}  // namespace h3d
