#include "hybrid3d/layers/window_layer.hpp"

#include "hybrid3d/core/error.hpp"

namespace h3d {

Padding parse_padding(const std::string& s) {
  if (s == "valid" || s == "0") return Padding::kValid;
  if (s == "half" || s == "k/2") return Padding::kHalf;
  if (s == "same") return Padding::kSame;
  H3D_THROW(UsageError, "padding '" << s << "' is unknown; use valid, half (k/2) or same");
}

Window1D make_window(int k, int stride, Padding p) {
  Window1D w;
  w.k = k;
  w.s = stride;
  switch (p) {
    case Padding::kValid: break;
    case Padding::kHalf: w.p_lo = w.p_hi = k / 2; break;
    case Padding::kSame:  // total k-1, the smaller half before (TensorFlow, PyTorch)
      w.p_lo = (k - 1) / 2;
      w.p_hi = k - 1 - w.p_lo;
      break;
  }
  return w;
}

}  // namespace h3d
