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
  // Returns the tensor the kernel reads: x itself, or the padded copy.
  const Tensor& gather(const Comm& group, const Tensor& x) {
    if (halo_.trivial()) return x;
    halo_.start(group, x, padded_);
    halo_.finish(padded_);
    return padded_;
  }
  const Tensor& saved(const Tensor& x) const { return halo_.trivial() ? x : padded_; }
  // kernel(out) writes the gradient w.r.t. the tensor the forward kernel
  // read (x itself, or the padded copy); the halo part of it is then sent
  // back to its owners and added into dx.
  template <typename Kernel>
  void input_grad(const Comm& group, const Tensor& x, Tensor& dx, Kernel kernel) {
    if (halo_.trivial()) {
      dx.reshape_like(x.shape());
      kernel(dx.data());
      return;
    }
    padded_grad_.reshape_like(padded_.shape());
    kernel(padded_grad_.data());
    halo_.reverse_start(group, padded_grad_, dx);
    halo_.reverse_finish(dx);
  }
  std::array<int64_t, 3> padded_extents() const { return halo_.padded_box().extents(); }

 private:
  HaloExchange halo_;
  Tensor padded_, padded_grad_;
};

}  // namespace h3d
