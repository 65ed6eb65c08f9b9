#include "hybrid3d/backend/backend.hpp"

#include <algorithm>
#include <sstream>
#include <vector>

#include "hybrid3d/core/error.hpp"

namespace h3d {

std::string ConvDesc::key() const {
  std::ostringstream os;
  os << n << ',' << cin << ',' << cout << ',' << bias;
  if (fused_leaky_slope > 0.0f) os << ",leaky " << fused_leaky_slope;
  for (int i = 0; i < 3; ++i)
    os << ';' << in[i] << ',' << out[i] << ',' << k[i] << ',' << stride[i] << ',' << pad_lo[i] << ',' << pad_hi[i];
  return os.str();
}

ConvDesc sub_convolution(const ConvDesc& d, const Box& region, std::array<int64_t, 3>& in_origin) {
  ConvDesc s = d;
  for (size_t i = 0; i < 3; ++i) {
    const Range o = region.r[i];
    const int64_t i0 = o.lo * d.stride[i] - d.pad_lo[i], i1 = (o.hi - 1) * d.stride[i] - d.pad_lo[i] + d.k[i];
    in_origin[i] = std::max<int64_t>(0, i0);
    s.pad_lo[i] = int(std::max<int64_t>(0, -i0));
    s.pad_hi[i] = int(std::max<int64_t>(0, i1 - d.in[i]));
    s.in[i] = std::min(i1, d.in[i]) - in_origin[i];
    s.out[i] = o.size();
  }
  return s;
}

void copy_region(const float* src, float* dst, int64_t nc, const std::array<int64_t, 3>& full,
                 const std::array<int64_t, 3>& origin, const std::array<int64_t, 3>& e, bool into_full) {
#pragma omp parallel for schedule(static)
  for (int64_t q = 0; q < nc; ++q)
    for (int64_t z = 0; z < e[0]; ++z)
      for (int64_t y = 0; y < e[1]; ++y) {
        const int64_t f = ((q * full[0] + origin[0] + z) * full[1] + origin[1] + y) * full[2] + origin[2];
        const int64_t c = ((q * e[0] + z) * e[1] + y) * e[2];
        if (into_full)
          std::copy_n(src + c, e[2], dst + f);
        else
          std::copy_n(src + f, e[2], dst + c);
      }
}

void Backend::conv3d_forward_region(const ConvDesc& d, const float* x, const float* w, const float* b, float* y,
                                    const Box& region) {
  if (region.empty()) return;
  std::array<int64_t, 3> origin{};
  const ConvDesc s = sub_convolution(d, region, origin);
  std::vector<float> xs(size_t(s.n * s.cin * s.in[0] * s.in[1] * s.in[2]));
  std::vector<float> ys(size_t(s.n * s.cout * s.out[0] * s.out[1] * s.out[2]));
  copy_region(x, xs.data(), s.n * s.cin, d.in, origin, s.in, false);
  conv3d_forward(s, xs.data(), w, b, ys.data());
  const std::array<int64_t, 3> out_origin{region.r[0].lo, region.r[1].lo, region.r[2].lo};
  copy_region(ys.data(), y, s.n * s.cout, d.out, out_origin, s.out, true);
}

}  // namespace h3d
