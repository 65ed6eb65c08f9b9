#include "hybrid3d/backend/cpu/cpu_conv_few_channels.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <dnnl.hpp>
#include <vector>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/core/tensor.hpp"

namespace h3d {

namespace {

// The longest fp32 chain of a chunk, as the slabs of cpu_conv.cpp.
constexpr int64_t kChunkPoints = 4096;
// One thread's column buffer stays within half of this machine's 2 MiB L2.
constexpr int64_t kColumnBytes = int64_t(1) << 20;

int64_t window_volume(const ConvDesc& d) { return int64_t(d.k[0]) * d.k[1] * d.k[2]; }

// The chunking of a problem: whole output rows of one sample.
struct Chunking {
  int64_t columns;     // cin * k^3: the gemm's N
  int64_t row_points;  // out[2]
  int64_t rows;        // output rows per chunk (the last of a sample may have fewer)
  int64_t per_sample;  // chunks per sample
  int64_t points() const { return rows * row_points; }
};

Chunking chunking(const ConvDesc& d) {
  Chunking c;
  c.columns = d.cin * window_volume(d);
  c.row_points = d.out[2];
  const int64_t budget = std::min(kChunkPoints, kColumnBytes / int64_t(sizeof(float)) / c.columns);
  c.rows = std::max<int64_t>(1, budget / c.row_points);
  const int64_t sample_rows = d.out[0] * d.out[1];
  c.rows = std::min(c.rows, sample_rows);
  c.per_sample = (sample_rows + c.rows - 1) / c.rows;
  return c;
}

// cols[col][point] for output rows [r0, r1) of sample n: col = ((ci * k0 +
// kd) * k1 + kh) * k2 + kw, point = (r - r0) * out[2] + ow; zero where the
// window reads padding.
void im2col_rows(const ConvDesc& d, const float* x, int64_t n, int64_t r0, int64_t r1, float* cols, int64_t ld) {
  const int64_t in_plane = d.in[1] * d.in[2], in_vol = d.in[0] * in_plane, w = d.out[2];
  for (int64_t ci = 0; ci < d.cin; ++ci)
    for (int kd = 0; kd < d.k[0]; ++kd)
      for (int kh = 0; kh < d.k[1]; ++kh)
        for (int kw = 0; kw < d.k[2]; ++kw) {
          const int64_t col = ((ci * d.k[0] + kd) * d.k[1] + kh) * d.k[2] + kw;
          // The ow whose input index ow * s - pad + kw falls inside [0, in[2]).
          const int64_t s = d.stride[2], off = kw - d.pad_lo[2];
          const int64_t lo = std::min(w, std::max<int64_t>(0, (-off + s - 1) / s));
          const int64_t hi = std::max(lo, std::min(w, (d.in[2] - off + s - 1) / s));
          for (int64_t r = r0; r < r1; ++r) {
            float* dst = cols + col * ld + (r - r0) * w;
            const int64_t iz = (r / d.out[1]) * d.stride[0] - d.pad_lo[0] + kd;
            const int64_t iy = (r % d.out[1]) * d.stride[1] - d.pad_lo[1] + kh;
            if (iz < 0 || iz >= d.in[0] || iy < 0 || iy >= d.in[1]) {
              std::fill(dst, dst + w, 0.0f);
              continue;
            }
            const float* src = x + (n * d.cin + ci) * in_vol + iz * in_plane + iy * d.in[2];
            std::fill(dst, dst + lo, 0.0f);
            if (s == 1)
              std::memcpy(dst + lo, src + lo + off, size_t(hi - lo) * sizeof(float));
            else
              for (int64_t ow = lo; ow < hi; ++ow) dst[ow] = src[ow * s + off];
            std::fill(dst + hi, dst + w, 0.0f);
          }
        }
}

}  // namespace

bool few_channel_weights_apply(const ConvDesc& d) {
  // Measured on AVX-512 (bench/conv_kernels): 4 channels, k = 2 and 3, run
  // 3x and 2x faster here than in oneDNN; at 16 channels oneDNN's own
  // kernels are as fast (and need no column buffer).
  return d.cin <= 4 && d.cin * window_volume(d) <= 256;
}

std::vector<int64_t> few_channel_weights_staging(const ConvDesc& d) {
  const Chunking c = chunking(d);
  const int64_t threads = omp_get_max_threads();
  return {threads * c.columns * c.points(), threads * (d.cout * c.columns + d.cout)};
}

void few_channel_backward_weights(const ConvDesc& d, const float* x, const float* dy, float* dw, float* db) {
  const Chunking c = chunking(d);
  const int64_t m = d.cout, ncol = c.columns, out_vol = d.out[0] * d.out[1] * d.out[2];
  const int64_t sample_rows = d.out[0] * d.out[1], chunks = d.n * c.per_sample;
  const int threads = int(std::min<int64_t>(omp_get_max_threads(), chunks));
  const int64_t part_len = m * ncol + m;  // a chunk's dW, then its db
  Tensor cols({int64_t(threads) * ncol * c.points()}), parts({int64_t(threads) * part_len});
  std::vector<double> acc(size_t(part_len), 0.0);
  bool failed = false;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    float* my_cols = cols.data() + t * ncol * c.points();
    float* my_part = parts.data() + t * part_len;
    for (int64_t first = 0; first < chunks; first += threads) {
      const int64_t chunk = first + t;
      if (chunk < chunks) {
        const int64_t n = chunk / c.per_sample, r0 = (chunk % c.per_sample) * c.rows;
        const int64_t r1 = std::min(sample_rows, r0 + c.rows), len = (r1 - r0) * c.row_points;
        im2col_rows(d, x, n, r0, r1, my_cols, len);
        const float* dyc = dy + n * m * out_vol + r0 * c.row_points;
        // One thread's gemm (inside a parallel region oneDNN runs it on
        // the calling thread), so the chunk's bits are fixed.
        if (dnnl_sgemm('N', 'T', m, ncol, len, 1.0f, dyc, out_vol, my_cols, len, 0.0f, my_part, ncol) != dnnl_success)
          failed = true;
        for (int64_t co = 0; co < m; ++co) {
          float s = 0.0f;
          const float* row = dyc + co * out_vol;
          for (int64_t i = 0; i < len; ++i) s += row[i];
          my_part[m * ncol + co] = s;
        }
      }
#pragma omp barrier
      // The round's partial sums, added in chunk order.
      const int64_t in_round = std::min<int64_t>(threads, chunks - first);
#pragma omp for schedule(static)
      for (int64_t e = 0; e < part_len; ++e) {
        double a = acc[size_t(e)];
        for (int64_t s = 0; s < in_round; ++s) a += parts.data()[s * part_len + e];
        acc[size_t(e)] = a;
      }
    }
  }
  H3D_CHECK(!failed, "oneDNN sgemm failed in the few-channel convolution backward weights");
  for (int64_t e = 0; e < m * ncol; ++e) dw[e] = float(acc[size_t(e)]);
  if (db)
    for (int64_t co = 0; co < m; ++co) db[co] = d.bias ? float(acc[size_t(m * ncol + co)]) : 0.0f;
}

}  // namespace h3d
