// Shared plumbing of the window layers (conv, pool): the halo-padded input.
//
// The rank computes exactly the outputs it owns from a padded copy of its
// input box (own cells + halo from neighbours + global-edge padding), so the
// kernel itself always runs with zero padding. When no halo or padding is
// needed the input is used as it is.
#pragma once
#include "hybrid3d/dist/halo_exchange.hpp"
#include "hybrid3d/layers/layer.hpp"

namespace h3d {

enum class Padding { kValid, kHalf, kSame };  // 0; k/2 on both sides; TF/PyTorch 'same'
Padding parse_padding(const std::string& s);
Window1D make_window(int k, int stride, Padding p);

class PaddedInput {
 public:
  void plan(const Distribution& in, const Window3D& w, const Distribution& out, int spatial_rank, float pad_value) {
    halo_ = HaloExchange(in, w, out, spatial_rank, pad_value);
  }
  // No halo and no padding: the kernel reads x itself.
  bool trivial() const { return halo_.trivial(); }
  // Returns the tensor the kernel reads: x itself, or the padded copy.
  const Tensor& gather(const Comm& group, const Tensor& x) {
    if (halo_.trivial()) return x;
    halo_.start(group, x, padded_);
    halo_.finish(padded_);
    return padded_;
  }
  // The same when x is not needed afterwards: the padded copy is grown in
  // x's own buffer when it has the capacity (see input_capacity()).
  const Tensor& gather_consuming(const Comm& group, Tensor& x) {
    if (halo_.trivial()) return x;
    if (!halo_.start_in_place(group, x, padded_)) {
      halo_.start(group, x, padded_);
      x.release();
    }
    halo_.finish(padded_);
    return padded_;
  }
  const Tensor& saved(const Tensor& x) const { return halo_.trivial() ? x : padded_; }
  // kernel(out) writes the gradient w.r.t. the tensor the forward kernel
  // read (x itself, or the padded copy); the halo part of it is then sent
  // back to its owners and added into dx. The padded copy is freed after
  // the kernel ran (release() it before to let the gradient reuse its buffer).
  template <typename Kernel>
  void input_grad(const Comm& group, const std::vector<int64_t>& x_shape, Tensor& dx, Kernel kernel) {
    if (halo_.trivial()) {
      dx.reshape_uninit(x_shape);
      kernel(dx.data());
      return;
    }
    auto e = halo_.padded_box().extents();
    Tensor grad;  // the kernel writes every cell
    grad.reshape_uninit({x_shape[0], x_shape[1], e[0], e[1], e[2]});
    kernel(grad.data());
    padded_.release();
    halo_.reverse_start(group, grad, dx);
    halo_.reverse_finish(dx);
  }
  // Capacity (floats) an input of n x c should have for gather_consuming.
  int64_t input_capacity(int64_t nc) const { return halo_.trivial() ? 0 : halo_.padded_floats(nc); }
  std::array<int64_t, 3> padded_extents() const { return halo_.padded_box().extents(); }
  void release() { padded_.release(); }

 private:
  HaloExchange halo_;
  Tensor padded_;
};

}  // namespace h3d
