#include "hybrid3d/train/regression_predictor.hpp"

#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hybrid3d/backend/registry.hpp"
#include "hybrid3d/core/error.hpp"
#include "hybrid3d/data/hdf5_source.hpp"
#include "hybrid3d/data/open_data.hpp"
#include "hybrid3d/data/sampler.hpp"
#include "hybrid3d/models/registry.hpp"
#include "hybrid3d/parallel/output_dir.hpp"
#include "hybrid3d/parallel/process_grid.hpp"
#include "hybrid3d/train/network_weights.hpp"

namespace h3d {

namespace {

constexpr int kP = SampleSource::kTargets;
const char* const kParamNames[kP] = {"Omega_m", "sigma_8", "n_s", "H_0"};

std::string base_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The directory a --data spec names: itself, or the directory of its glob.
std::string data_directory(const std::string& spec) {
  struct stat st{};
  if (::stat(spec.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return spec;
  const auto slash = spec.find_last_of('/');
  return slash == std::string::npos ? "." : spec.substr(0, std::max<size_t>(slash, 1));
}

// Which source universe each sample was cut from, by preprocess's manifest.
struct Origins {
  std::vector<int64_t> universe;  // per sample: index into names
  std::vector<std::string> source;
  std::vector<int64_t> source_sample;
};

// Empty when there is no manifest (the samples are whole universes).
Origins read_origins(const Hdf5Universes& src, const std::string& spec) {
  Origins o;
  const std::string path = data_directory(spec) + "/manifest.json";
  std::ifstream in(path);
  if (!in) return o;
  nlohmann::json m;
  try {
    in >> m;
  } catch (const std::exception& e) {
    H3D_THROW(UsageError, "'" << path << "' is not a valid preprocess manifest: " << e.what());
  }
  std::map<std::string, const nlohmann::json*> by_file;
  try {
    for (const auto& f : m.at("files")) by_file[f.at("file").get<std::string>()] = &f.at("samples");
  } catch (const std::exception& e) {
    H3D_THROW(UsageError, "'" << path << "' is not a valid preprocess manifest (no files[].file / samples): "
                              << e.what());
  }
  std::map<std::pair<std::string, int64_t>, int64_t> ids;
  for (int64_t i = 0; i < src.size(); ++i) {
    const std::string name = base_name(src.file_of(i));
    const auto it = by_file.find(name);
    H3D_USAGE_CHECK(it != by_file.end() && src.within(i) < int64_t(it->second->size()),
                    "'" << path << "' does not list sample " << src.within(i) << " of '" << name
                        << "': the manifest belongs to other data (rerun preprocess, or move the manifest away "
                        << "to predict per sample only)");
    const nlohmann::json& s = (*it->second)[size_t(src.within(i))];
    std::pair<std::string, int64_t> key;
    try {
      key = {s.at("source").get<std::string>(), s.at("source_sample").get<int64_t>()};
    } catch (const std::exception& e) {
      H3D_THROW(UsageError, "'" << path << "': the entry of '" << name << "' has no source / source_sample: "
                                << e.what());
    }
    auto [pos, fresh] = ids.emplace(key, int64_t(o.source.size()));
    if (fresh) o.source.push_back(key.first), o.source_sample.push_back(key.second);
    o.universe.push_back(pos->second);
  }
  return o;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string param_header() {
  std::string h;
  for (const char* p : kParamNames) h += std::string(",true_") + p + ",pred_" + p;
  return h;
}

std::string param_values(const double* truth, const double* pred) {
  std::string v;
  char b[64];
  for (int j = 0; j < kP; ++j) std::snprintf(b, sizeof b, ",%.9g,%.9g", truth[j], pred[j]), v += b;
  return v;
}

void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    out.close();
    if (!out) H3D_THROW(Error, "cannot write '" << tmp << "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    H3D_THROW(Error, "cannot rename '" << tmp << "' to '" << path << "': " << std::strerror(errno));
}

// "MSE 0.0123 (Omega_m 0.01 ...), MAE ..." over rows of [true kP, pred kP].
std::string error_summary(const std::vector<double>& rows, int64_t n) {
  double mse[kP] = {}, mae[kP] = {}, mean = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int j = 0; j < kP; ++j) {
      const double d = rows[size_t(i * 2 * kP + kP + j)] - rows[size_t(i * 2 * kP + j)];
      mse[j] += d * d / double(n), mae[j] += std::abs(d) / double(n);
    }
  for (int j = 0; j < kP; ++j) mean += mse[j] / kP;
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(5);
  os << "MSE " << mean << " (";
  for (int j = 0; j < kP; ++j) os << (j ? " " : "") << kParamNames[j] << " " << mse[j];
  os << "), MAE";
  for (int j = 0; j < kP; ++j) os << " " << kParamNames[j] << " " << mae[j];
  return os.str();
}

}  // namespace

std::string universes_csv_path(const std::string& out) {
  const std::string stem = out.size() > 4 && out.compare(out.size() - 4, 4, ".csv") == 0 ? out.substr(0, out.size() - 4)
                                                                                         : out;
  return stem + ".universes.csv";
}

void predict_regression(const Comm& world, const PredictOptions& o) {
  H3D_USAGE_CHECK(!is_segmentation(o.model), "predict_regression needs a regression model");
  H3D_USAGE_CHECK(o.input.empty(), "--input is for segmentation models; give a regression dataset as --data");
  H3D_USAGE_CHECK(!o.init.empty() && !o.data.empty() && !o.out.empty(),
                  "predict --model " << o.model.model << " needs --init, --data (a directory or glob of CosmoFlow "
                                     << "HDF5 files) and --out (a CSV file)");
  H3D_USAGE_CHECK(o.batch_size >= 0, "--batch-size must not be negative");
  require_writable_parent("--out", o.out);
  ProcessGrid grid(world, o.spatial);
  H3D_USAGE_CHECK(o.batch_size == 0 || o.batch_size >= grid.data_groups(),
                  "--batch-size " << o.batch_size << " is smaller than the " << grid.data_groups()
                                  << " data-parallel groups (" << grid.describe() << "); use at least "
                                  << grid.data_groups());
  auto backend = make_backend(o.backend);
  Hdf5Universes src(grid.group(), o.data, parse_transform(o.transform), parse_read_mode(o.read_mode), "--data");
  const int64_t S = o.model.input_size;
  const auto ext = src.extent();
  DataRequest req;
  req.side = S;
  require_model_input(src, req, model_in_channels(o.model));
  const Origins origins = read_origins(src, o.data);

  Network net = build_model_for(o.model, ext, grid);
  const ActShape& in = net.input_shape();
  load_network_weights(net, o.init, "--init");

  const bool root = world.rank() == 0, say = root && !o.quiet;
  const int64_t n = src.size(), B = o.batch_size > 0 ? o.batch_size : grid.data_groups(), batches = eval_batches(n, B), G = grid.data_groups();
  const int64_t lo = grid.group_index() * B / G, hi = (grid.group_index() + 1) * B / G;
  if (say)
    std::printf("predict: %lld samples of %lld^3 in %lld mini-batches of %lld (%s)\n", (long long)n, (long long)S,
                (long long)batches, (long long)B, grid.describe().c_str()),
        std::fflush(stdout);
  const Box block = in.dist.box(grid.spatial_rank());
  const int64_t vol = block.volume(), C = in.channels;
  const auto be = block.extents();
  // Per sample: true[kP], pred[kP]; each filled by its group's first rank only, summed over the world.
  std::vector<double> rows(size_t(n * 2 * kP), 0.0);
  std::vector<int64_t> ids;
  std::vector<float> weights, targets;
  const auto t0 = std::chrono::steady_clock::now();
  double last_print = 0;
  for (int64_t b = 0; b < batches; ++b) {
    eval_batch(n, B, b, ids, weights);
    const int64_t m = hi - lo;
    Tensor x;
    x.reshape_uninit({m, C, be[0], be[1], be[2]});
    targets.assign(size_t(m * kP), 0.0f);
    for (int64_t s = 0; s < m; ++s)
      src.load(ids[size_t(lo + s)], block, x.data() + s * C * vol, targets.data() + s * kP);
    StepContext ctx = make_step_context(backend.get(), &grid, o.model.seed, o.halo_overlap, false, 0, lo, m);
    const Tensor& y = net.forward(ctx, std::move(x));
    H3D_CHECK(y.numel() == m * kP, "the model's output has " << y.numel() << " values for " << m << " samples");
    if (grid.spatial_rank() == 0)
      for (int64_t s = 0; s < m; ++s) {
        if (weights[size_t(lo + s)] == 0) continue;  // padding of the last mini-batch
        double* r = &rows[size_t(ids[size_t(lo + s)] * 2 * kP)];
        for (int j = 0; j < kP; ++j) r[j] = targets[size_t(s * kP + j)], r[kP + j] = y[s * kP + j];
      }
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (say && (t - last_print > 5.0 || b + 1 == batches)) {
      std::printf("predict: %lld/%lld samples, %.0f s\n", (long long)std::min(n, (b + 1) * B), (long long)n, t);
      std::fflush(stdout);
      last_print = t;
    }
  }
  world.allreduce_sum(rows.data(), int64_t(rows.size()));
  if (root) {
    std::string csv = "file,sample" + param_header() + "\n";
    for (int64_t i = 0; i < n; ++i)
      csv += csv_field(src.file_of(i)) + "," + std::to_string(src.within(i)) +
             param_values(&rows[size_t(i * 2 * kP)], &rows[size_t(i * 2 * kP + kP)]) + "\n";
    write_atomically(o.out, csv);
    if (say) std::printf("predict: wrote %s; per sample: %s\n", o.out.c_str(), error_summary(rows, n).c_str());
    if (!origins.source.empty()) {
      const int64_t U = int64_t(origins.source.size());
      std::vector<double> mean(size_t(U * 2 * kP), 0.0);
      std::vector<int64_t> pieces(static_cast<size_t>(U), 0);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t u = origins.universe[size_t(i)];
        ++pieces[size_t(u)];
        for (int j = 0; j < 2 * kP; ++j) mean[size_t(u * 2 * kP + j)] += rows[size_t(i * 2 * kP + j)];
      }
      std::string ucsv = "source,source_sample,pieces" + param_header() + "\n";
      for (int64_t u = 0; u < U; ++u) {
        for (int j = 0; j < 2 * kP; ++j) mean[size_t(u * 2 * kP + j)] /= double(pieces[size_t(u)]);
        ucsv += csv_field(origins.source[size_t(u)]) + "," + std::to_string(origins.source_sample[size_t(u)]) + "," +
                std::to_string(pieces[size_t(u)]) +
                param_values(&mean[size_t(u * 2 * kP)], &mean[size_t(u * 2 * kP + kP)]) + "\n";
      }
      const std::string upath = universes_csv_path(o.out);
      write_atomically(upath, ucsv);
      if (say)
        std::printf("predict: wrote %s; per universe (%lld, the mean of their sub-volumes): %s\n", upath.c_str(),
                    (long long)U, error_summary(mean, U).c_str());
    }
    std::fflush(stdout);
  }
  world.barrier();
}

}  // namespace h3d
