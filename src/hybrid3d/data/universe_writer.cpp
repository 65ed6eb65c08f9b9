#include "hybrid3d/data/universe_writer.hpp"

#include <hdf5.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/data/hdf5_util.hpp"
#include "hybrid3d/data/synthetic_segmentation.hpp"
#include "hybrid3d/data/synthetic_universe.hpp"
#include "hybrid3d/parallel/output_dir.hpp"

namespace h3d {

namespace {

bool file_exists(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0;
}

// A small float dataset of the root's values, written collectively (the
// other ranks select nothing).
void write_small(hid_t file, const char* name, const float* v, hsize_t n, bool root, hid_t dxpl,
                 const std::string& path) {
  H5Handle space{h5_check(H5Screate_simple(1, &n, nullptr), "dataspace", path), H5Sclose};
  H5Handle ds{h5_check(H5Dcreate2(file, name, H5T_IEEE_F32LE, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                      "dataset create", path),
              H5Dclose};
  H5Handle mem{h5_check(H5Screate_simple(1, &n, nullptr), "dataspace", path), H5Sclose};
  if (!root) {
    H5Sselect_none(space.id);
    H5Sselect_none(mem.id);
  }
  h5_check(H5Dwrite(ds.id, H5T_NATIVE_FLOAT, mem.id, space.id, dxpl, v), "write", path);
}

}  // namespace

std::string universe_file_name(int64_t index) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "univ_%06lld.h5", static_cast<long long>(index));
  return buf;
}

void write_universe(const Comm& group, const std::string& path, int64_t side, uint64_t seed, int64_t index) {
  const int64_t r = group.rank(), p = group.size();
  const int64_t d0 = side * r / p, d1 = side * (r + 1) / p;
  const Box box{{Range{d0, d1}, Range{0, side}, Range{0, side}}};
  float unit[4];
  const std::vector<int16_t> block = generate_universe_block(group, side, seed, index, box, unit);
  // Channels first in memory, channels last in the file.
  const int64_t vol = box.volume();
  std::vector<int16_t> last(size_t(vol * 4));
  for (int64_t v = 0; v < vol; ++v)
    for (int64_t c = 0; c < 4; ++c) last[size_t(v * 4 + c)] = block[size_t(c * vol + v)];
  const CosmoParams phys = CosmoParams::from_unit(unit);
  const float phys_par[4] = {float(phys.omega_m), float(phys.sigma_8), float(phys.n_s), float(100.0 * phys.h)};

  const std::string tmp = path + ".tmp";
  {
    H5Handle fapl{h5_check(H5Pcreate(H5P_FILE_ACCESS), "property list", tmp), H5Pclose};
    h5_check(H5Pset_fapl_mpio(fapl.id, group.raw(), MPI_INFO_NULL), "MPI-IO driver", tmp);
    H5Handle file{h5_check(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id), "file create", tmp),
                  H5Fclose};
    H5Handle dxpl{h5_check(H5Pcreate(H5P_DATASET_XFER), "property list", tmp), H5Pclose};
    h5_check(H5Pset_dxpl_mpio(dxpl.id, H5FD_MPIO_COLLECTIVE), "collective transfer", tmp);
    const hsize_t dims[4] = {hsize_t(side), hsize_t(side), hsize_t(side), 4};
    H5Handle space{h5_check(H5Screate_simple(4, dims, nullptr), "dataspace", tmp), H5Sclose};
    H5Handle ds{h5_check(H5Dcreate2(file.id, "full", H5T_STD_I16LE, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                        "dataset create", tmp),
                H5Dclose};
    const hsize_t start[4] = {hsize_t(d0), 0, 0, 0}, count[4] = {hsize_t(d1 - d0), hsize_t(side), hsize_t(side), 4};
    const hsize_t one = 1;
    H5Handle mem{h5_check(vol > 0 ? H5Screate_simple(4, count, nullptr) : H5Screate_simple(1, &one, nullptr),
                         "dataspace", tmp),
                 H5Sclose};
    if (vol > 0) {
      h5_check(H5Sselect_hyperslab(space.id, H5S_SELECT_SET, start, nullptr, count, nullptr), "selection", tmp);
    } else {
      H5Sselect_none(space.id);
      H5Sselect_none(mem.id);
    }
    int16_t dummy = 0;
    h5_check(H5Dwrite(ds.id, H5T_NATIVE_SHORT, mem.id, space.id, dxpl.id, vol > 0 ? last.data() : &dummy), "write",
             tmp);
    write_small(file.id, "unitPar", unit, 4, group.rank() == 0, dxpl.id, tmp);
    write_small(file.id, "physPar", phys_par, 4, group.rank() == 0, dxpl.id, tmp);
  }  // closed (collectively) before the rename
  group.barrier();
  if (group.rank() == 0 && std::rename(tmp.c_str(), path.c_str()) != 0)
    H3D_THROW(Error, "cannot rename '" << tmp << "' to '" << path << "': " << std::strerror(errno));
  group.barrier();
}

void generate_universes(const Comm& world, const GenerateOptions& o) {
  H3D_USAGE_CHECK(!o.out.empty(), "generate needs --out DIR");
  H3D_USAGE_CHECK(o.size >= 8 && o.size <= 4096, "--size " << o.size << " is outside 8..4096");
  H3D_USAGE_CHECK(o.count >= 1, "--count must be at least 1");
  H3D_USAGE_CHECK(o.first_index >= 0, "--first-index must not be negative");
  const int g = o.ranks_per_universe > 0 ? o.ranks_per_universe : world.size();
  H3D_USAGE_CHECK(world.size() % g == 0, "--ranks-per-universe " << g << " does not divide the " << world.size()
                                                                  << " ranks; use a divisor of " << world.size());
  H3D_USAGE_CHECK(g <= o.size, "--ranks-per-universe " << g << " is more than the " << o.size
                                                        << " slabs of a " << o.size << "^3 universe");
  create_output_dir(world, o.out, "--out");

  const int groups = world.size() / g, mine = world.rank() / g;
  Comm group = world.split(mine, world.rank());
  int64_t written = 0, skipped = 0;
  for (int64_t i = mine; i < o.count; i += groups) {
    const int64_t index = o.first_index + i;
    const std::string path = o.out + "/" + universe_file_name(index);
    // The group's root decides, so that a file appearing meanwhile cannot
    // split the group.
    int exists = group.rank() == 0 && file_exists(path) ? 1 : 0;
    group.bcast(&exists, sizeof exists, 0);
    if (exists) {
      ++skipped;
      continue;
    }
    write_universe(group, path, o.size, o.seed, index);
    ++written;
    if (group.rank() == 0 && !o.quiet) {
      std::printf("generated %s (%lld^3 x 4, group %d of %d)\n", path.c_str(), static_cast<long long>(o.size),
                  mine + 1, groups);
      std::fflush(stdout);
    }
  }
  // Counted once per group (by its root).
  const int64_t all_written = world.allreduce_sum(group.rank() == 0 ? written : int64_t(0));
  const int64_t all_skipped = world.allreduce_sum(group.rank() == 0 ? skipped : int64_t(0));
  if (world.rank() == 0 && !o.quiet)
    std::printf("generate: %lld written, %lld already complete, in %s\n", static_cast<long long>(all_written),
                static_cast<long long>(all_skipped), o.out.c_str());
}

void generate_segmentation_cases(const Comm& world, const GenerateOptions& o) {
  H3D_USAGE_CHECK(o.size >= 8 && o.size <= 1024, "--size " << o.size << " is outside 8..1024");
  H3D_USAGE_CHECK(o.count >= 1, "--count must be at least 1");
  H3D_USAGE_CHECK(o.first_index >= 0, "--first-index must not be negative");
  create_output_dir(world, o.out, "--out");
  SyntheticSegmentation gen(o.size, o.first_index + o.count, o.seed);
  const int64_t n = o.size * o.size * o.size;
  const Box whole{{Range{0, o.size}, Range{0, o.size}, Range{0, o.size}}};
  int64_t written = 0, skipped = 0;
  std::vector<float> volume(static_cast<size_t>(n)), labels(static_cast<size_t>(n));
  for (int64_t i = world.rank(); i < o.count; i += world.size()) {
    const int64_t index = o.first_index + i;
    char name[64];
    std::snprintf(name, sizeof name, "/case_%06lld.h5", static_cast<long long>(index));
    const std::string path = o.out + name, tmp = path + ".tmp";
    if (file_exists(path)) {
      ++skipped;
      continue;
    }
    gen.load(index, whole, volume.data(), labels.data());
    std::vector<uint8_t> seg(labels.begin(), labels.end());
    {
      H5Handle file{h5_check(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "file create", tmp),
                    H5Fclose};
      const hsize_t dims[3] = {hsize_t(o.size), hsize_t(o.size), hsize_t(o.size)};
      H5Handle space{h5_check(H5Screate_simple(3, dims, nullptr), "dataspace", tmp), H5Sclose};
      H5Handle v{h5_check(H5Dcreate2(file.id, "volume", H5T_IEEE_F32LE, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                         "dataset create", tmp),
                 H5Dclose};
      h5_check(H5Dwrite(v.id, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, volume.data()), "write", tmp);
      H5Handle l{h5_check(H5Dcreate2(file.id, "segmentation", H5T_STD_U8LE, space.id, H5P_DEFAULT, H5P_DEFAULT,
                                    H5P_DEFAULT),
                         "dataset create", tmp),
                 H5Dclose};
      h5_check(H5Dwrite(l.id, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, seg.data()), "write", tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      H3D_THROW(Error, "cannot rename '" << tmp << "' to '" << path << "': " << std::strerror(errno));
    ++written;
  }
  const int64_t all_written = world.allreduce_sum(written), all_skipped = world.allreduce_sum(skipped);
  if (world.rank() == 0 && !o.quiet)
    std::printf("generate: %lld segmentation cases of %lld^3 written, %lld already complete, in %s\n",
                static_cast<long long>(all_written), static_cast<long long>(o.size),
                static_cast<long long>(all_skipped), o.out.c_str());
}

}  // namespace h3d
