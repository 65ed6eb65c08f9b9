// Average pooling as cosmoflow-lbann runs it after its first convolution
// (3^3 windows, stride 2, 16 x 128^3, with and without padding 1), forward
// and backward through the cpu backend: best of 5, one line each.
// POOL_DUMP=PREFIX writes the outputs (y then dx) to PREFIX0 / PREFIX1, to
// compare two builds bitwise (cmp) after a change to the kernels.
//
// usage: pool_kernels   (threads: OMP_NUM_THREADS)
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "best_seconds.hpp"
#include "hybrid3d/backend/cpu/cpu_backend.hpp"

using namespace h3d;

int main() {
  CpuBackend be;
  for (int pad : {1, 0}) {
    PoolDesc d;
    d.kind = PoolKind::kAvg;
    d.c = 16;
    d.in = {128, 128, 128};
    d.k = {3, 3, 3};
    d.stride = {2, 2, 2};
    d.pad_lo = d.pad_hi = {pad, pad, pad};
    for (size_t i = 0; i < 3; ++i) d.out[i] = (d.in[i] + 2 * pad - 3) / 2 + 1;
    std::vector<float> x(size_t(d.c * d.in[0] * d.in[1] * d.in[2])), dx(x.size());
    std::vector<float> y(size_t(d.c * d.out[0] * d.out[1] * d.out[2])), dy(y.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 97) * 0.01f - 0.3f;
    for (size_t i = 0; i < dy.size(); ++i) dy[i] = float(i % 89) * 0.01f - 0.3f;
    const double f = best_seconds(5, [&] { be.pool3d_forward(d, x.data(), y.data()); });
    const double b = best_seconds(5, [&] { be.pool3d_backward(d, nullptr, dy.data(), dx.data()); });
    std::printf("average pooling 3^3 stride 2 padding %d, 16 x 128^3: forward %.1f ms, backward %.1f ms\n", pad,
                f * 1e3, b * 1e3);
    if (const char* dump = std::getenv("POOL_DUMP")) {
      std::FILE* out = std::fopen((std::string(dump) + std::to_string(pad)).c_str(), "wb");
      if (!out) return 1;
      std::fwrite(y.data(), sizeof(float), y.size(), out);
      std::fwrite(dx.data(), sizeof(float), dx.size(), out);
      std::fclose(out);
    }
  }
}
