#include "hybrid3d/train/predictor.hpp"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "hybrid3d/backend/registry.hpp"
#include "hybrid3d/core/error.hpp"
#include "hybrid3d/data/hdf5_util.hpp"
#include "hybrid3d/data/nifti_io.hpp"
#include "hybrid3d/data/nifti_segmentation.hpp"
#include "hybrid3d/data/open_data.hpp"
#include "hybrid3d/models/registry.hpp"
#include "hybrid3d/parallel/output_dir.hpp"
#include "hybrid3d/parallel/process_grid.hpp"
#include "hybrid3d/train/network_weights.hpp"
#include "hybrid3d/train/seg_loss.hpp"

namespace h3d {

namespace {

// Window starts along one dimension of extent e for side s: every `step`,
// the last one flush with the end.
std::vector<int64_t> window_starts(int64_t e, int64_t s, double overlap) {
  const int64_t step = std::max<int64_t>(1, int64_t(std::floor(double(s) * (1.0 - overlap))));
  std::vector<int64_t> out;
  for (int64_t a = 0; a + s < e; a += step) out.push_back(a);
  out.push_back(e - s);
  return out;
}

// The Gaussian importance of each index of a window side (sigma s/8),
// floored so that no voxel of a window counts for nothing.
std::vector<double> importance(int64_t s) {
  std::vector<double> g(static_cast<size_t>(s));
  const double sigma = double(s) / 8.0, c = double(s) / 2.0;
  for (int64_t i = 0; i < s; ++i) {
    const double d = double(i) + 0.5 - c;
    g[size_t(i)] = std::max(std::exp(-d * d / (2 * sigma * sigma)), 1e-3);
  }
  return g;
}

void write_prediction(const std::string& path, const std::vector<uint8_t>& labels, const std::vector<float>* probs,
                      const std::array<int64_t, 3>& e, int64_t classes) {
  const std::string tmp = path + ".tmp";
  {
    H5Handle f{H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose};
    h5_check(f.id, "file create", tmp);
    const hsize_t dims[4] = {hsize_t(classes), hsize_t(e[0]), hsize_t(e[1]), hsize_t(e[2])};
    H5Handle s3{H5Screate_simple(3, dims + 1, nullptr), H5Sclose};
    H5Handle seg{H5Dcreate2(f.id, "segmentation", H5T_STD_U8LE, s3.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                 H5Dclose};
    h5_check(seg.id, "dataset create", tmp);
    h5_check(H5Dwrite(seg.id, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()), "write", tmp);
    if (probs) {
      H5Handle s4{H5Screate_simple(4, dims, nullptr), H5Sclose};
      H5Handle p{H5Dcreate2(f.id, "probabilities", H5T_IEEE_F32LE, s4.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                 H5Dclose};
      h5_check(p.id, "dataset create", tmp);
      h5_check(H5Dwrite(p.id, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, probs->data()), "write", tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    H3D_THROW(Error, "cannot rename '" << tmp << "' to '" << path << "': " << std::strerror(errno));
}

// The case to segment, read at its own size: NIfTI or HDF5 (LiTS layout),
// with or without its labels.
std::unique_ptr<SampleSource> open_case(const Comm& comm, const PredictOptions& o) {
  DataRequest r;
  r.segmentation = true;
  r.side = 0;
  r.classes = o.model.classes;
  r.intensity_window = o.intensity_window;
  r.require_labels = false;
  return open_dataset(comm, o.input, r, "--input");
}

}  // namespace

void predict_volume(const Comm& world, const PredictOptions& o) {
  H3D_USAGE_CHECK(is_segmentation(o.model), "predict_volume needs a segmentation model (--model unet3d)");
  H3D_USAGE_CHECK(o.data.empty(), "--data is for regression models; give the case to segment as --input");
  H3D_USAGE_CHECK(!o.init.empty() && !o.input.empty() && !o.out.empty(), "predict needs --init, --input and --out");
  H3D_USAGE_CHECK(o.window_overlap >= 0 && o.window_overlap < 1,
                  "--window-overlap " << o.window_overlap << " must be in [0, 1)");
  require_writable_parent("--out", o.out);
  ProcessGrid grid(world, o.spatial);
  auto backend = make_backend(o.backend);
  const int64_t S = o.model.input_size, K = o.model.classes;
  Network net = build_model_for(o.model, {S, S, S}, grid);
  const ActShape& in = net.input_shape();
  load_network_weights(net, o.init, "--init");
  const bool nifti_out = is_nifti_path(o.out);
  H3D_USAGE_CHECK(!(nifti_out && o.probabilities), "--probabilities needs an HDF5 --out (.h5); NIfTI holds the labels");
  const std::unique_ptr<SampleSource> input = open_case(grid.group(), o);
  SampleSource& src = *input;
  H3D_USAGE_CHECK(src.size() == 1, "--input '" << o.input << "' holds " << src.size() << " cases; give one file");
  H3D_USAGE_CHECK(src.channels() == in.channels, "--input has " << src.channels() << " channels, the model "
                                                                << in.channels << " (--in-channels)");
  const std::array<int64_t, 3> E = src.extent();
  for (int d = 0; d < 3; ++d)
    H3D_USAGE_CHECK(E[size_t(d)] >= S, "--input is " << E[0] << "x" << E[1] << "x" << E[2] << ", smaller than the "
                                                      << S << "^3 window; use a smaller --input-size");

  std::array<std::vector<int64_t>, 3> starts;
  for (int d = 0; d < 3; ++d) starts[size_t(d)] = window_starts(E[size_t(d)], S, o.window_overlap);
  std::vector<std::array<int64_t, 3>> windows;
  for (int64_t a : starts[0])
    for (int64_t b : starts[1])
      for (int64_t c : starts[2]) windows.push_back({a, b, c});
  const bool root = world.rank() == 0, say = root && !o.quiet;
  const int64_t G = grid.data_groups(), rounds = (int64_t(windows.size()) + G - 1) / G;
  if (say)
    std::printf("predict: %zu windows of %lld^3 (overlap %.2f) over %lldx%lldx%lld, %lld at a time (%s)\n",
                windows.size(), (long long)S, o.window_overlap, (long long)E[0], (long long)E[1], (long long)E[2],
                (long long)G, grid.describe().c_str()),
        std::fflush(stdout);

  const Box block = in.dist.box(grid.spatial_rank());
  const auto be = block.extents();
  const int64_t vol = block.volume();
  const std::vector<double> g = importance(S);
  const int64_t total = E[0] * E[1] * E[2];
  std::vector<float> acc, wsum;
  if (root) acc.assign(size_t(K * total), 0.0f), wsum.assign(size_t(total), 0.0f);
  const auto t0 = std::chrono::steady_clock::now();
  double last_print = 0;
  for (int64_t r = 0; r < rounds; ++r) {
    const int64_t w = r * G + grid.group_index();
    std::vector<float> payload;  // weighted probabilities of this rank's block
    int64_t header[4] = {-1, 0, 0, 0};
    if (w < int64_t(windows.size())) {
      const auto& org = windows[size_t(w)];
      Box file_box = block;
      for (int d = 0; d < 3; ++d) file_box.r[size_t(d)].lo += org[size_t(d)], file_box.r[size_t(d)].hi += org[size_t(d)];
      Tensor x;
      x.reshape_uninit({1, in.channels, be[0], be[1], be[2]});
      std::vector<float> unused(static_cast<size_t>(vol));
      src.load(0, file_box, x.data(), unused.data());
      StepContext ctx = make_step_context(backend.get(), &grid, o.model.seed, o.halo_overlap, false, 0, 0, 1);
      const Tensor& y = net.forward(ctx, std::move(x));
      payload.resize(size_t(K * vol));
      for (int64_t z = 0; z < be[0]; ++z)
        for (int64_t yy = 0; yy < be[1]; ++yy)
          for (int64_t xx = 0; xx < be[2]; ++xx) {
            const int64_t v = (z * be[1] + yy) * be[2] + xx;
            const double wt = g[size_t(z + block.r[0].lo)] * g[size_t(yy + block.r[1].lo)] *
                              g[size_t(xx + block.r[2].lo)];
            double mx = -1e300, sum = 0;
            for (int64_t k = 0; k < K; ++k) mx = std::max(mx, double(y[k * vol + v]));
            for (int64_t k = 0; k < K; ++k) sum += std::exp(double(y[k * vol + v]) - mx);
            for (int64_t k = 0; k < K; ++k)
              payload[size_t(k * vol + v)] = float(wt * std::exp(double(y[k * vol + v]) - mx) / sum);
          }
      header[0] = w;
    }
    // Rank 0 gathers every rank's block of its group's window.
    std::vector<int64_t> headers(size_t(4 * world.size()));
    world.gather(header, 4, headers.data(), 0);
    int count = mpi_count(int64_t(payload.size()));
    std::vector<int> counts(static_cast<size_t>(world.size())), displs(static_cast<size_t>(world.size()));
    world.gather(&count, 1, counts.data(), 0);
    std::vector<float> all;
    if (root) {
      int64_t off = 0;
      for (int q = 0; q < world.size(); ++q) displs[size_t(q)] = int(off), off += counts[size_t(q)];
      all.resize(size_t(off));
    }
    world.gatherv(payload.data(), count, all.data(), counts, displs, 0);
    if (root) {
      for (int q = 0; q < world.size(); ++q) {
        const int64_t wq = headers[size_t(4 * q)];
        if (wq < 0) continue;
        const auto& org = windows[size_t(wq)];
        const Box qb = in.dist.box(q % in.dist.group_size());  // world rank = group * D*H*W + spatial rank
        const auto qe = qb.extents();
        const int64_t qv = qb.volume();
        const float* p = all.data() + displs[size_t(q)];
        for (int64_t z = 0; z < qe[0]; ++z)
          for (int64_t yy = 0; yy < qe[1]; ++yy)
            for (int64_t xx = 0; xx < qe[2]; ++xx) {
              const int64_t lz = z + qb.r[0].lo, ly = yy + qb.r[1].lo, lx = xx + qb.r[2].lo;
              const int64_t gv = ((lz + org[0]) * E[1] + (ly + org[1])) * E[2] + (lx + org[2]);
              const int64_t v = (z * qe[1] + yy) * qe[2] + xx;
              wsum[size_t(gv)] += float(g[size_t(lz)] * g[size_t(ly)] * g[size_t(lx)]);
              for (int64_t k = 0; k < K; ++k) acc[size_t(k * total + gv)] += p[k * qv + v];
            }
      }
    }
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (say && (t - last_print > 2.0 || r + 1 == rounds)) {
      std::printf("predict: %lld/%zu windows, %.0f s\n", (long long)std::min<int64_t>((r + 1) * G, windows.size()),
                  windows.size(), t);
      std::fflush(stdout);
      last_print = t;
    }
  }
  // Labels of the whole case on rank 0, for the Dice (read before the
  // output is written: the output may replace nothing of the input).
  std::vector<float> truth;
  if (root && src.has_labels()) {
    const std::unique_ptr<SampleSource> whole = open_case(Comm::self(), o);
    std::vector<float> image(size_t(total * in.channels));
    truth.resize(size_t(total));
    whole->load(0, Box{{Range{0, E[0]}, Range{0, E[1]}, Range{0, E[2]}}}, image.data(), truth.data());
  }
  if (root) {
    std::vector<uint8_t> labels(static_cast<size_t>(total));
    Tensor probs({1, K, E[0], E[1], E[2]});
    for (int64_t v = 0; v < total; ++v) {
      int64_t best = 0;
      for (int64_t k = 0; k < K; ++k) {
        probs[k * total + v] = acc[size_t(k * total + v)] / wsum[size_t(v)];
        if (probs[k * total + v] > probs[best * total + v]) best = k;
      }
      labels[size_t(v)] = uint8_t(best);
    }
    std::vector<float> flat;
    if (o.probabilities) flat = probs.to_vector();
    if (nifti_out)
      write_nifti_labels(o.out, E, labels.data(), NiftiSegmentation::recognises(o.input) ? o.input : "");
    else
      write_prediction(o.out, labels, o.probabilities ? &flat : nullptr, E, K);
    if (say) std::printf("predict: wrote %s\n", o.out.c_str());
    if (!truth.empty()) {
      SegMetrics m(K);
      m.add(probs, std::vector<int32_t>(truth.begin(), truth.end()), -1);
      std::string dice;
      for (int64_t k = 0; k < K; ++k) {
        char b[32];
        std::snprintf(b, sizeof b, " %.4f", m.dice(k));
        dice += b;
      }
      if (say) std::printf("predict: dice per class against the input's labels%s\n", dice.c_str());
    }
    std::fflush(stdout);
  }
  world.barrier();
}

}  // namespace h3d
