#include "hybrid3d/data/preprocess.hpp"

#include <hdf5.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/data/hdf5_source.hpp"
#include "hybrid3d/data/hdf5_util.hpp"
#include "hybrid3d/parallel/output_dir.hpp"

namespace h3d {

namespace {

// One output sample: sub-volume `box` of source sample `source`.
struct Piece {
  int64_t source;
  Box box;
};

struct Plan {
  bool lbann = false, int16 = true, batched = false;
  int64_t side = 0, channels = 0;
  std::vector<Piece> pieces;  // in output order
  int64_t files = 0;
};

std::string output_name(const PreprocessOptions& o, int64_t file) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s_%06lld.h5", o.samples_per_file > 1 ? "batch" : "sample", (long long)file);
  return o.out + "/" + buf;
}


// An existing output that has the shape, layout and type this run would write.
bool already_complete(const std::string& path, const Plan& plan, int64_t samples) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return false;
  const Hdf5Universes::FileInfo fi = Hdf5Universes::inspect(path);
  return fi.error.empty() && fi.samples == samples && fi.batched == plan.batched &&
         fi.channels_last == !plan.lbann && fi.integer == plan.int16 && fi.channels == plan.channels &&
         fi.extent == std::array<int64_t, 3>{plan.side, plan.side, plan.side};
}

// Writes output file `f` (its pieces read from `src`) as NAME.tmp, renamed when complete.
void write_file(Hdf5Universes& src, const PreprocessOptions& o, const Plan& plan, int64_t f) {
  const std::string path = output_name(o, f), tmp = path + ".tmp";
  const int64_t first = f * o.samples_per_file;
  const int64_t n = std::min<int64_t>(o.samples_per_file, int64_t(plan.pieces.size()) - first);
  const hsize_t S = hsize_t(plan.side), C = hsize_t(plan.channels);
  std::vector<hsize_t> dims;
  if (plan.batched) dims.push_back(hsize_t(n));
  if (plan.lbann)
    dims.insert(dims.end(), {C, S, S, S});
  else
    dims.insert(dims.end(), {S, S, S, C});
  const int rank = int(dims.size());
  {
    H5Handle file{h5_check(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "file create", tmp),
                  H5Fclose};
    H5Handle space{h5_check(H5Screate_simple(rank, dims.data(), nullptr), "dataspace", tmp), H5Sclose};
    H5Handle dcpl{h5_check(H5Pcreate(H5P_DATASET_CREATE), "property list", tmp), H5Pclose};
    if (o.chunk > 0) {
      std::vector<hsize_t> chunk = dims;
      const hsize_t c = std::min<hsize_t>(hsize_t(o.chunk), S);
      if (plan.batched) chunk[0] = 1;
      const size_t sp = plan.batched ? 1 : 0;
      for (size_t d = 0; d < 3; ++d) chunk[sp + (plan.lbann ? 1 : 0) + d] = c;
      h5_check(H5Pset_chunk(dcpl.id, rank, chunk.data()), "chunk layout", tmp);
      if (o.compress > 0) h5_check(H5Pset_deflate(dcpl.id, unsigned(o.compress)), "gzip filter", tmp);
    }
    H5Handle ds{h5_check(H5Dcreate2(file.id, "full", plan.int16 ? H5T_STD_I16LE : H5T_IEEE_F32LE, space.id,
                                    H5P_DEFAULT, dcpl.id, H5P_DEFAULT),
                         "dataset create", tmp),
                H5Dclose};
    std::vector<float> block(size_t(S * S * S * C)), last, units(size_t(4 * n));
    const int64_t vol = int64_t(S * S * S);
    for (int64_t i = 0; i < n; ++i) {
      const Piece& p = plan.pieces[size_t(first + i)];
      src.load(p.source, p.box, block.data(), units.data() + 4 * i);
      if (plan.int16)
        for (float v : block)
          if (v != std::nearbyint(v) || v < -32768.0f || v > 32767.0f)
            H3D_THROW(Error, "'" << src.file_of(p.source) << "' holds values that are not int16 counts (" << v
                                      << "); preprocess it with --dtype float32");
      const float* data = block.data();
      if (!plan.lbann) {  // channels last
        last.resize(block.size());
        for (int64_t v = 0; v < vol; ++v)
          for (int64_t c = 0; c < int64_t(C); ++c) last[size_t(v * int64_t(C) + c)] = block[size_t(c * vol + v)];
        data = last.data();
      }
      std::vector<hsize_t> start(size_t(rank), 0), count = dims;
      if (plan.batched) start[0] = hsize_t(i), count[0] = 1;
      h5_check(H5Sselect_hyperslab(space.id, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr), "selection",
            tmp);
      H5Handle mem{h5_check(H5Screate_simple(rank, count.data(), nullptr), "dataspace", tmp), H5Sclose};
      h5_check(H5Dwrite(ds.id, H5T_NATIVE_FLOAT, mem.id, space.id, H5P_DEFAULT, data), "write", tmp);
    }
    std::vector<hsize_t> pdims;
    if (plan.batched) pdims.push_back(hsize_t(n));
    pdims.push_back(4);
    H5Handle pspace{h5_check(H5Screate_simple(int(pdims.size()), pdims.data(), nullptr), "dataspace", tmp), H5Sclose};
    H5Handle pds{h5_check(H5Dcreate2(file.id, "unitPar", H5T_IEEE_F32LE, pspace.id, H5P_DEFAULT, H5P_DEFAULT,
                                     H5P_DEFAULT),
                          "dataset create", tmp),
                 H5Dclose};
    h5_check(H5Dwrite(pds.id, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, units.data()), "write", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    H3D_THROW(Error, "cannot rename '" << tmp << "' to '" << path << "': " << std::strerror(errno));
}

void write_manifest(const Hdf5Universes& src, const PreprocessOptions& o, const Plan& plan) {
  nlohmann::json files = nlohmann::json::array();
  for (int64_t f = 0; f < plan.files; ++f) {
    nlohmann::json samples = nlohmann::json::array();
    const int64_t first = f * o.samples_per_file;
    const int64_t n = std::min<int64_t>(o.samples_per_file, int64_t(plan.pieces.size()) - first);
    for (int64_t i = 0; i < n; ++i) {
      const Piece& p = plan.pieces[size_t(first + i)];
      samples.push_back({{"source", src.file_of(p.source)},
                         {"source_sample", src.within(p.source)},
                         {"offset", {p.box.r[0].lo, p.box.r[1].lo, p.box.r[2].lo}}});
    }
    const std::string name = output_name(o, f);
    files.push_back({{"file", name.substr(name.find_last_of('/') + 1)}, {"samples", samples}});
  }
  nlohmann::json m = {{"source", o.in},
                      {"sample_shape", plan.lbann ? std::vector<int64_t>{plan.channels, plan.side, plan.side, plan.side}
                                                  : std::vector<int64_t>{plan.side, plan.side, plan.side, plan.channels}},
                      {"layout", plan.lbann ? "lbann" : "original"},
                      {"dtype", plan.int16 ? "int16" : "float32"},
                      {"samples", plan.pieces.size()},
                      {"samples_per_file", o.samples_per_file},
                      {"chunk", o.chunk},
                      {"gzip", o.compress},
                      {"files", files}};
  const std::string path = o.out + "/manifest.json", tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << m.dump(1) << "\n";
    if (!out) H3D_THROW(Error, "cannot write '" << tmp << "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    H3D_THROW(Error, "cannot rename '" << tmp << "' to '" << path << "': " << std::strerror(errno));
}

Plan make_plan(const Hdf5Universes& src, const PreprocessOptions& o) {
  Plan plan;
  H3D_USAGE_CHECK(o.layout == "original" || o.layout == "lbann",
                  "--layout '" << o.layout << "' is unknown; use original (D, H, W, C) or lbann (C, D, H, W)");
  plan.lbann = o.layout == "lbann";
  const std::string dtype = o.dtype.empty() ? (plan.lbann ? "float32" : "int16") : o.dtype;
  H3D_USAGE_CHECK(dtype == "int16" || dtype == "float32", "--dtype '" << dtype << "' is unknown; use int16 or float32");
  plan.int16 = dtype == "int16";
  H3D_USAGE_CHECK(o.samples_per_file >= 1, "--samples-per-file must be at least 1");
  plan.batched = o.samples_per_file > 1;
  H3D_USAGE_CHECK(o.chunk >= 0, "--chunk must not be negative");
  H3D_USAGE_CHECK(o.compress >= 0 && o.compress <= 9, "--gzip must be 0..9");
  H3D_USAGE_CHECK(o.compress == 0 || o.chunk > 0, "--gzip needs chunked output: give --chunk too (for example 32)");
  const auto e = src.extent();
  plan.side = o.sample_size > 0 ? o.sample_size : e[0];
  plan.channels = src.channels();
  for (int d = 0; d < 3; ++d)
    H3D_USAGE_CHECK(e[size_t(d)] % plan.side == 0,
                    "--sample-size " << plan.side << " does not divide the universes (" << e[0] << "x" << e[1] << "x"
                                     << e[2] << "); use a divisor of each side");
  // A sample is converted in memory (as float, twice: channels first and last).
  H3D_USAGE_CHECK(plan.side <= 2048 && plan.side * plan.side * plan.side * plan.channels <= (int64_t(1) << 33),
                  "a sample of " << plan.side << "^3 x " << plan.channels << " is too large to preprocess (at most "
                                 << "2048^3 voxels); give a smaller --sample-size");
  const int64_t k0 = e[0] / plan.side, k1 = e[1] / plan.side, k2 = e[2] / plan.side;
  for (int64_t s = 0; s < src.size(); ++s)
    for (int64_t a = 0; a < k0; ++a)
      for (int64_t b = 0; b < k1; ++b)
        for (int64_t c = 0; c < k2; ++c) {
          const int64_t S = plan.side;
          plan.pieces.push_back({s, Box{{Range{a * S, a * S + S}, Range{b * S, b * S + S}, Range{c * S, c * S + S}}}});
        }
  plan.files = (int64_t(plan.pieces.size()) + o.samples_per_file - 1) / o.samples_per_file;
  return plan;
}

}  // namespace

void preprocess_universes(const Comm& world, const PreprocessOptions& o) {
  H3D_USAGE_CHECK(!o.in.empty() && !o.out.empty(), "preprocess needs --in and --out");
  create_output_dir(world, o.out, "--out");
  struct stat st{}, in_st{};
  ::stat(o.out.c_str(), &st);
  H3D_USAGE_CHECK(!(::stat(o.in.c_str(), &in_st) == 0 && in_st.st_dev == st.st_dev && in_st.st_ino == st.st_ino),
                  "--out '" << o.out << "' is the --in directory; give another one");
  // The scan (collective) names every bad input file before anything is written.
  Comm self = Comm::self();
  Hdf5Universes src(world, o.in, InputTransform::kNone, ReadMode::kIndependent, "--in");
  Hdf5Universes reader(self, o.in, InputTransform::kNone, ReadMode::kIndependent, "--in");  // this rank's own, no communication
  const Plan plan = make_plan(src, o);
  const bool root = world.rank() == 0, say = root && !o.quiet;
  if (say)
    std::printf("preprocess: %s -> %lld samples of %lld^3 x %lld (%s, %s) in %lld file(s) in %s\n",
                src.describe().c_str(), (long long)plan.pieces.size(), (long long)plan.side,
                (long long)plan.channels, plan.lbann ? "lbann" : "original", plan.int16 ? "int16" : "float32",
                (long long)plan.files, o.out.c_str()),
        std::fflush(stdout);
  // Rounds of one file per rank, so that rank 0 can count everyone's
  // progress in one reduction per round.
  const auto t0 = std::chrono::steady_clock::now();
  double last_print = 0;
  const int64_t p = world.size(), rounds = (plan.files + p - 1) / p;
  int64_t done[2] = {0, 0};  // written, skipped (this rank)
  for (int64_t r = 0; r < rounds; ++r) {
    const int64_t f = r * p + world.rank();
    if (f < plan.files) {
      const int64_t n = std::min<int64_t>(o.samples_per_file, int64_t(plan.pieces.size()) - f * o.samples_per_file);
      if (already_complete(output_name(o, f), plan, n)) {
        ++done[1];
      } else {
        write_file(reader, o, plan, f);
        ++done[0];
      }
    }
    int64_t all[2] = {done[0], done[1]};
    world.allreduce(all, 2, ReduceOp::kSum);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (say && (t - last_print > 2.0 || r + 1 == rounds)) {
      const double left = all[0] > 0 ? t / double(all[0] + all[1]) * double(plan.files - all[0] - all[1]) : 0.0;
      std::printf("preprocess: %lld/%lld files (%lld written, %lld already complete), %.0f s, about %.0f s left\n",
                  (long long)(all[0] + all[1]), (long long)plan.files, (long long)all[0], (long long)all[1], t, left);
      std::fflush(stdout);
      last_print = t;
    }
  }
  world.barrier();
  if (root) write_manifest(src, o, plan);
  if (say) std::printf("preprocess: wrote %s/manifest.json\n", o.out.c_str()), std::fflush(stdout);
}

}  // namespace h3d
