#include "hybrid3d/layers/activation.hpp"

namespace h3d {

void Activation::apply(StepContext& ctx, const float* x, Tensor& y) {
  if (!absorbed_)
    ctx.backend->activation_forward(kind_, p_, x, y.data(), y.numel());
  else if (x != y.data())
    ctx.backend->allocator().copy(y.data(), x, size_t(y.numel()));
  if (ctx.training && sign_mask_kind() && !grad_absorbed_) {
    // One bit per output, in 64-bit words: two floats of storage per word.
    mask_.set_allocator(ctx.backend->allocator());
    mask_.reshape_uninit({2 * ((y.numel() + 63) / 64)});
    ctx.backend->sign_mask(y.data(), mask_words(), y.numel());
  }
}

void Activation::apply_grad(StepContext& ctx, const Tensor& y, const float* dy, Tensor& dx) {
  if (grad_absorbed_) {  // the layer after applied it
    if (dy != dx.data()) ctx.backend->allocator().copy(dx.data(), dy, size_t(dx.numel()));
    return;
  }
  if (sign_mask_kind()) {
    H3D_CHECK(mask_.numel() * 32 >= dx.numel(), "layer " << name_ << ": backward without a training forward");
    ctx.backend->masked_slope_backward(mask_words(), kind_ == ActKind::kRelu ? 0.0f : p_, dy, dx.data(), dx.numel());
    return;
  }
  ctx.backend->activation_backward(kind_, p_, y.data(), dy, dx.data(), dx.numel());
}

void Activation::forward(StepContext& ctx, const Tensor& x, Tensor& y) {
  y.reshape_uninit(x.shape());
  apply(ctx, x.data(), y);
}

void Activation::forward_consuming(StepContext& ctx, Tensor& x, Tensor& y) {
  y = std::move(x);
  apply(ctx, y.data(), y);
}

void Activation::backward(StepContext& ctx, const Tensor&, const Tensor& y, const Tensor& dy, Tensor& dx) {
  dx.reshape_uninit(dy.shape());
  apply_grad(ctx, y, dy.data(), dx);
}

void Activation::backward_consuming(StepContext& ctx, const Tensor&, const Tensor& y, Tensor& dy, Tensor& dx) {
  dx = std::move(dy);
  apply_grad(ctx, y, dx.data(), dx);
}

}  // namespace h3d
