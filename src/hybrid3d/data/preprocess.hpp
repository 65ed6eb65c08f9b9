// `hybrid3d preprocess`: cuts universes into sub-volume samples, as the
// CosmoFlow benchmark data is made (a 512^3 universe into 64 samples of
// 128^3), optionally changing the layout, the type, the number of samples
// per file and the chunking.
//
// Output: `sample_NNNNNN.h5` (one sample per file) or `batch_NNNNNN.h5`
// (--samples-per-file N > 1, a leading sample dimension), numbered in the
// order (source file, sample in it, sub-volume in D, H, W order); each with
// `full` in the chosen layout and `unitPar` (the source sample's, shared by
// all its sub-volumes). `manifest.json` lists every output file with, for
// each of its samples, the source file, the sample's place in it and the
// sub-volume's offset, and the options that made them.
//
// The output files are shared out over the ranks; each rank reads its
// sub-volumes by hyperslab and writes whole files alone. Every file is
// written as NAME.tmp and renamed when complete; a rerun skips the files
// that exist with the expected shape, layout and type and rewrites the
// rest. The manifest is written last, the same way.
#pragma once
#include <cstdint>
#include <string>

#include "hybrid3d/parallel/comm.hpp"
#include "hybrid3d/data/preprocess_options.hpp"

namespace h3d {

// Collective over the world. Throws UsageError for options or inputs that
// cannot work (the same on every rank).
void preprocess_universes(const Comm& world, const PreprocessOptions& o);

}  // namespace h3d
