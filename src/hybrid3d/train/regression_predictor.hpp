// `hybrid3d predict` for regression models (cosmoflow, cosmoflow-lbann):
// the four parameters of every sample of a file dataset.
//
// The world is cut as in training: each data group takes its share of every
// mini-batch of --batch-size samples and each rank reads and computes only
// its block (--spatial), so a sample too large for one rank is predicted
// like it was trained. Rank 0 gathers the predictions and writes, as a
// temporary name renamed when complete:
//
//   --out FILE.csv      one row per sample: file, sample (its place in the
//                       file), true_P and pred_P for each parameter P of
//                       Omega_m, sigma_8, n_s, H_0, in the stored unitPar
//                       scale ([-1, 1], what the network is trained on);
//   FILE.universes.csv  when the dataset was made by `preprocess` (a
//                       manifest.json beside the files): one row per source
//                       universe, source and source_sample, its number of
//                       sub-volumes, true_P and pred_P = the mean of its
//                       sub-volumes' predictions.
//
// The MSE and MAE per parameter of both are printed.
#pragma once
#include <string>

#include "hybrid3d/parallel/comm.hpp"
#include "hybrid3d/train/predictor.hpp"

namespace h3d {

// The name of the per-universe table written beside `out`.
std::string universes_csv_path(const std::string& out);

// Collective over `world`. UsageError (the same on every rank) for bad
// options, data or a manifest that does not describe the data, before any
// sample is computed.
void predict_regression(const Comm& world, const PredictOptions& o);

}  // namespace h3d
