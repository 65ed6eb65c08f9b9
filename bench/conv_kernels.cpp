// Kernel efficiency: every convolution of cosmoflow and cosmoflow-lbann at
// 128^3 (batch 1, one rank, the padded shapes the layers pass), forward,
// backward-data and backward-weights through the cpu backend, against the
// sgemm rate measured in the same run. Best of --reps; prints JSON lines.
//
// usage: conv_kernels [--reps 3] [--size 128]   (threads: OMP_NUM_THREADS)
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "best_seconds.hpp"
#include "hybrid3d/backend/cpu/cpu_backend.hpp"
#include "hybrid3d/core/tensor.hpp"

using namespace h3d;

namespace {

struct Layer {
  std::string model, name;
  int64_t cin, cout, side;
  int k, stride;
  int pad_lo, pad_hi;
};

std::vector<Layer> layers(int64_t size) {
  std::vector<Layer> out;
  int64_t side = size, cin = 4;
  for (int i = 0; side >= 8 && i < 5; ++i) {  // cosmoflow: kernel 2, 'same' (0 before, 1 after)
    int64_t cout = std::min<int64_t>(int64_t(32) << i, 512);
    out.push_back({"cosmoflow", "conv" + std::to_string(i + 1), cin, cout, side, 2, 1, 0, 1});
    cin = cout;
    side /= 2;
  }
  const int64_t widths[7] = {16, 32, 64, 128, 256, 256, 256};
  side = size;
  cin = 4;
  for (int i = 0; i < 7; ++i) {  // cosmoflow-lbann: kernel 3, padding 1, conv4 stride 2, pools halve
    out.push_back({"cosmoflow-lbann", "conv" + std::to_string(i + 1), cin, widths[i], side, 3, i == 3 ? 2 : 1, 1, 1});
    side = i == 3 ? side / 2 : side;
    if (i < 5) side = (side + 1) / 2;
    cin = widths[i];
    if (side < 1) break;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 3;
  int64_t size = 128;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--size")) size = std::atoll(argv[i + 1]);
  }
  CpuBackend be;
  {
    const int64_t n = 2048;
    Tensor a({n, n}, 0.5f), b({n, n}, 0.25f), c({n, n});
    double s = best_seconds(reps, [&] { be.gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); });
    std::printf("{\"kind\": \"sgemm\", \"m\": %lld, \"gflops\": %.1f, \"threads\": %d}\n", (long long)n,
                2.0 * n * n * n / s / 1e9, omp_get_max_threads());
  }
  for (const Layer& l : layers(size)) {
    ConvDesc d;
    d.n = 1;
    d.cin = l.cin;
    d.cout = l.cout;
    d.k = {l.k, l.k, l.k};
    d.stride = {l.stride, l.stride, l.stride};
    d.bias = l.model == "cosmoflow";
    int64_t padded = l.side + l.pad_lo + l.pad_hi, out = (padded - l.k) / l.stride + 1;
    d.in = {padded, padded, padded};
    d.out = {out, out, out};
    Tensor x({1, l.cin, padded, padded, padded}, 0.1f), w({l.cout, l.cin, l.k, l.k, l.k}, 0.01f), b({l.cout}),
        y({1, l.cout, out, out, out}), dx(x.shape()), dw(w.shape()), db({l.cout});
    double flops = 2.0 * double(l.cout) * double(l.cin) * l.k * l.k * l.k * double(out * out * out);
    double f = best_seconds(reps, [&] { be.conv3d_forward(d, x.data(), w.data(), b.data(), y.data()); });
    double bd = best_seconds(reps, [&] { be.conv3d_backward_data(d, y.data(), w.data(), dx.data()); });
    double bw = best_seconds(reps, [&] { be.conv3d_backward_weights(d, x.data(), y.data(), dw.data(), db.data()); });
    std::printf("{\"kind\": \"conv\", \"model\": \"%s\", \"layer\": \"%s\", \"cin\": %lld, \"cout\": %lld, \"side\": %lld, "
                "\"k\": %d, \"stride\": %d, \"gflop\": %.3f, \"forward_gflops\": %.1f, \"backward_data_gflops\": %.1f, "
                "\"backward_weights_gflops\": %.1f}\n",
                l.model.c_str(), l.name.c_str(), (long long)l.cin, (long long)l.cout, (long long)l.side, l.k, l.stride,
                flops / 1e9, flops / f / 1e9, flops / bd / 1e9, flops / bw / 1e9);
    std::fflush(stdout);
  }
  return 0;
}
