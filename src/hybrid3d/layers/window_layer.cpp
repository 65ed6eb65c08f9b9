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

Box PaddedInput::interior_outputs() const {
  const Box early = halo_.early_box(), padded = halo_.padded_box();
  Box out;
  for (int d = 0; d < 3; ++d) {
    // Output j reads the padded cells [j*s, j*s + k).
    const Window1D& w = window_[size_t(d)];
    const int64_t a = early.r[d].lo - padded.r[d].lo, b = early.r[d].hi - padded.r[d].lo;
    const int64_t lo = (a + w.s - 1) / w.s, hi = b >= w.k ? (b - w.k) / w.s + 1 : 0;
    out.r[d] = Range{lo, std::min(hi, out_ext_[size_t(d)])};
  }
  return out.empty() ? Box{} : out;
}

std::vector<Box> PaddedInput::around(const Box& all, const Box& inner) {
  if (inner.empty()) return {all};
  std::vector<Box> out;
  Box rest = all;
  for (int d = 0; d < 3; ++d) {
    Box lo = rest, hi = rest;
    lo.r[d] = Range{rest.r[d].lo, inner.r[d].lo};
    hi.r[d] = Range{inner.r[d].hi, rest.r[d].hi};
    if (!lo.empty()) out.push_back(lo);
    if (!hi.empty()) out.push_back(hi);
    rest.r[d] = inner.r[d];
  }
  return out;
}

}  // namespace h3d
