// Reference convolution and pooling: direct loops over every output and
// window tap, accumulating in double.
#include <cmath>
#include <limits>
#include <vector>

#include "hybrid3d/backend/ref/ref_backend.hpp"
#include "hybrid3d/core/error.hpp"

namespace h3d {

namespace {

struct Geom {
  std::array<int64_t, 3> in, out;
  std::array<int, 3> k, s, p;
  int64_t in_vol() const { return in[0] * in[1] * in[2]; }
  int64_t out_vol() const { return out[0] * out[1] * out[2]; }
  int64_t kvol() const { return int64_t(k[0]) * k[1] * k[2]; }
  // Calls f(input_offset or -1 when in padding, tap index) for every tap of output o.
  template <typename F>
  void taps(int64_t oz, int64_t oy, int64_t ox, F f) const {
    int64_t t = 0;
    for (int a = 0; a < k[0]; ++a)
      for (int b = 0; b < k[1]; ++b)
        for (int c = 0; c < k[2]; ++c, ++t) {
          int64_t z = oz * s[0] - p[0] + a, y = oy * s[1] - p[1] + b, x = ox * s[2] - p[2] + c;
          bool inside = z >= 0 && z < in[0] && y >= 0 && y < in[1] && x >= 0 && x < in[2];
          f(inside ? (z * in[1] + y) * in[2] + x : -1, t);
        }
  }
  template <typename F>
  void outputs(F f) const {
    for (int64_t z = 0; z < out[0]; ++z)
      for (int64_t y = 0; y < out[1]; ++y)
        for (int64_t x = 0; x < out[2]; ++x) f(z, y, x, (z * out[1] + y) * out[2] + x);
  }
};

Geom geom(const ConvDesc& d) { return {d.in, d.out, d.k, d.stride, d.pad_lo}; }
Geom geom(const PoolDesc& d) { return {d.in, d.out, d.k, d.stride, d.pad_lo}; }

}  // namespace

void RefBackend::conv3d_forward(const ConvDesc& d, const float* x, const float* w, const float* b, float* y) {
  Geom g = geom(d);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t co = 0; co < d.cout; ++co)
      g.outputs([&](int64_t oz, int64_t oy, int64_t ox, int64_t o) {
        double acc = (d.bias && b) ? b[co] : 0.0;
        for (int64_t ci = 0; ci < d.cin; ++ci) {
          const float* xc = x + (n * d.cin + ci) * g.in_vol();
          const float* wc = w + (co * d.cin + ci) * g.kvol();
          g.taps(oz, oy, ox, [&](int64_t i, int64_t t) {
            if (i >= 0) acc += double(xc[i]) * wc[t];
          });
        }
        const float v = static_cast<float>(acc);
        y[(n * d.cout + co) * g.out_vol() + o] = d.fused_leaky_slope > 0.0f && !(v > 0) ? d.fused_leaky_slope * v : v;
      });
}

void RefBackend::conv3d_backward_data(const ConvDesc& d, const float* dy, const float* w, float* dx) {
  Geom g = geom(d);
  std::vector<double> acc(static_cast<size_t>(d.n * d.cin * g.in_vol()), 0.0);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t co = 0; co < d.cout; ++co)
      g.outputs([&](int64_t oz, int64_t oy, int64_t ox, int64_t o) {
        double gy = dy[(n * d.cout + co) * g.out_vol() + o];
        for (int64_t ci = 0; ci < d.cin; ++ci) {
          double* ac = acc.data() + (n * d.cin + ci) * g.in_vol();
          const float* wc = w + (co * d.cin + ci) * g.kvol();
          g.taps(oz, oy, ox, [&](int64_t i, int64_t t) {
            if (i >= 0) ac[i] += gy * wc[t];
          });
        }
      });
  for (size_t i = 0; i < acc.size(); ++i) dx[i] = static_cast<float>(acc[i]);
}

void RefBackend::conv3d_backward_weights(const ConvDesc& d, const float* x, const float* dy, float* dw, float* db) {
  Geom g = geom(d);
  std::vector<double> acc(static_cast<size_t>(d.cout * d.cin * g.kvol()), 0.0), accb(size_t(d.cout), 0.0);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t co = 0; co < d.cout; ++co)
      g.outputs([&](int64_t oz, int64_t oy, int64_t ox, int64_t o) {
        double gy = dy[(n * d.cout + co) * g.out_vol() + o];
        accb[size_t(co)] += gy;
        for (int64_t ci = 0; ci < d.cin; ++ci) {
          const float* xc = x + (n * d.cin + ci) * g.in_vol();
          double* ac = acc.data() + (co * d.cin + ci) * g.kvol();
          g.taps(oz, oy, ox, [&](int64_t i, int64_t t) {
            if (i >= 0) ac[t] += gy * xc[i];
          });
        }
      });
  for (size_t i = 0; i < acc.size(); ++i) dw[i] = static_cast<float>(acc[i]);
  if (db)
    for (int64_t co = 0; co < d.cout; ++co) db[co] = static_cast<float>(accb[size_t(co)]);
}

void RefBackend::pool3d_forward(const PoolDesc& d, const float* x, float* y) {
  Geom g = geom(d);
  for (int64_t nc = 0; nc < d.n * d.c; ++nc) {
    const float* xc = x + nc * g.in_vol();
    g.outputs([&](int64_t oz, int64_t oy, int64_t ox, int64_t o) {
      double acc = d.kind == PoolKind::kMax ? -std::numeric_limits<double>::infinity() : 0.0;
      g.taps(oz, oy, ox, [&](int64_t i, int64_t) {
        if (i < 0) return;
        if (d.kind == PoolKind::kMax) {
          if (xc[i] > acc) acc = xc[i];
        } else {
          acc += xc[i];
        }
      });
      y[nc * g.out_vol() + o] = static_cast<float>(d.kind == PoolKind::kMax ? acc : acc / double(g.kvol()));
    });
  }
}

void RefBackend::pool3d_backward(const PoolDesc& d, const float* x, const float* dy, float* dx) {
  Geom g = geom(d);
  std::vector<double> acc(static_cast<size_t>(g.in_vol()));
  for (int64_t nc = 0; nc < d.n * d.c; ++nc) {
    const float* xc = x ? x + nc * g.in_vol() : nullptr;  // average pooling passes no x
    std::fill(acc.begin(), acc.end(), 0.0);
    g.outputs([&](int64_t oz, int64_t oy, int64_t ox, int64_t o) {
      double gy = dy[nc * g.out_vol() + o];
      if (d.kind == PoolKind::kAvg) {
        g.taps(oz, oy, ox, [&](int64_t i, int64_t) {
          if (i >= 0) acc[size_t(i)] += gy / double(g.kvol());
        });
        return;
      }
      int64_t arg = -1;  // first maximum in window order, as PyTorch
      float best = -std::numeric_limits<float>::infinity();
      g.taps(oz, oy, ox, [&](int64_t i, int64_t) {
        if (i >= 0 && (arg < 0 || xc[i] > best)) {
          best = xc[i];
          arg = i;
        }
      });
      if (arg >= 0) acc[size_t(arg)] += gy;
    });
    // With the ReLU's gradient after it (x read before dx, which may be x, is written).
    const bool relu = d.kind == PoolKind::kMax && d.relu_grad_slope >= 0.0f;
    for (int64_t i = 0; i < g.in_vol(); ++i) {
      const float v = static_cast<float>(acc[size_t(i)]);
      dx[nc * g.in_vol() + i] = !relu || xc[i] > 0.0f ? v : d.relu_grad_slope * v;
    }
  }
}


void RefBackend::pool3d_forward_argmax(const PoolDesc& d, const float* x, float* y, uint8_t* arg) {
  H3D_CHECK(d.kind == PoolKind::kMax && int64_t(d.k[0]) * d.k[1] * d.k[2] < kNoArg,
            "pool3d_forward_argmax: max pooling of at most 126 cells per window");
  Geom g = geom(d);
  for (int64_t nc = 0; nc < d.n * d.c; ++nc) {
    const float* xc = x + nc * g.in_vol();
    g.outputs([&](int64_t oz, int64_t oy, int64_t ox, int64_t o) {
      int64_t at = -1, first = kNoArg;  // first maximum in window order, as pool3d_backward finds it
      g.taps(oz, oy, ox, [&](int64_t i, int64_t t) {
        if (i >= 0 && (at < 0 || xc[i] > xc[at])) at = i, first = t;
      });
      const float v = at < 0 ? -std::numeric_limits<float>::infinity() : xc[at];
      y[nc * g.out_vol() + o] = v;
      arg[nc * g.out_vol() + o] = uint8_t(first | (v > 0.0f ? kArgPositive : 0));
    });
  }
}

void RefBackend::pool3d_backward_argmax(const PoolDesc& d, const uint8_t* arg, const float* dy, float* dx) {
  Geom g = geom(d);
  std::vector<double> acc(static_cast<size_t>(g.in_vol()));
  std::vector<uint8_t> positive(static_cast<size_t>(g.in_vol()));
  for (int64_t nc = 0; nc < d.n * d.c; ++nc) {
    std::fill(acc.begin(), acc.end(), 0.0);
    std::fill(positive.begin(), positive.end(), uint8_t(0));
    g.outputs([&](int64_t oz, int64_t oy, int64_t ox, int64_t o) {
      const uint8_t a = arg[nc * g.out_vol() + o];
      if ((a & kNoArg) == kNoArg) return;
      g.taps(oz, oy, ox, [&](int64_t i, int64_t t) {
        if (t != (a & kNoArg) || i < 0) return;
        acc[size_t(i)] += dy[nc * g.out_vol() + o];
        positive[size_t(i)] = a & kArgPositive;
      });
    });
    // A cell no window chose holds 0 either way; one chosen holds x, whose
    // sign every window that chose it recorded.
    const bool relu = d.relu_grad_slope >= 0.0f;
    for (int64_t i = 0; i < g.in_vol(); ++i) {
      const float v = static_cast<float>(acc[size_t(i)]);
      dx[nc * g.in_vol() + i] = !relu || positive[size_t(i)] ? v : d.relu_grad_slope * v;
    }
  }
}

}  // namespace h3d
