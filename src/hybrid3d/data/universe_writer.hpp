// `hybrid3d generate`: synthetic universes written as CosmoFlow HDF5 files.
//
// Layout of each file (the CosmoFlow benchmark's): dataset `full`, int16,
// (D, H, W, 4) channels last; `unitPar`, float32 (4,); `physPar`, float32
// (4,) = Omega_m, sigma_8, n_s, H_0. The world is cut into groups of
// `ranks_per_universe` ranks; group g generates universes first_index + i
// for i = g, g + groups, ... Within a group each rank generates a slab of D
// (the distributed FFT of generate_universe_block) and writes it into the
// same file with parallel HDF5 (MPI-IO, collective), so no rank holds the
// whole cube. The bytes of `full` are the same whatever the number of ranks.
//
// A file is written as NAME.tmp and renamed when complete: a rerun skips
// the files that exist and rewrites any leftover .tmp.
#pragma once
#include <cstdint>
#include <string>

#include "hybrid3d/parallel/comm.hpp"
#include "hybrid3d/data/generate_options.hpp"

namespace h3d {

// The file name of universe `index` inside the output directory.
std::string universe_file_name(int64_t index);

// Collective over `group`: writes universe `index` to `path` (see above).
void write_universe(const Comm& group, const std::string& path, int64_t side, uint64_t seed, int64_t index);

// Collective over the world. Throws UsageError for options that cannot work
// (the same on every rank).
void generate_universes(const Comm& world, const GenerateOptions& o);

// --kind segmentation: synthetic segmentation cases (data/synthetic_segmentation.hpp)
// in the LiTS layout, case_NNNNNN.h5 with `volume` float32 (D, H, W) and
// `segmentation` uint8 (D, H, W), the same as training on `synthetic`
// with the same --seed and index; the ranks share out the cases (each is
// a pure function of its index: no communication), tmp + rename, reruns
// skip complete files.
void generate_segmentation_cases(const Comm& world, const GenerateOptions& o);

}  // namespace h3d
