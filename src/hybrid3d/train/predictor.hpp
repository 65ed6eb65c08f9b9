// `hybrid3d predict`: segments a whole volume larger than the network's
// input with overlapping sliding windows.
//
// Windows of the training side S start every S * (1 - overlap) voxels along
// each dimension, the last one flush with the end, so any volume of at
// least S^3 is covered (it need not be a multiple of anything). The world
// is cut as in training: each data group takes its own windows, one per
// round, and within a group each rank reads and computes only its block of
// the window (the spatial layout of --spatial). The class probabilities of
// a window are weighted by a Gaussian importance map (sigma S/8 per
// dimension, as nnU-Net and MONAI blend) and summed on rank 0, which divides
// by the summed weights: where one window alone covers a voxel, that is
// exactly the window's own prediction.
//
// Input: a NIfTI image (.nii, .nii.gz; its labels are used when its
// partner file is there, see NiftiSegmentation) or an HDF5 case (LiTS
// layout). Output, written as a temporary name and renamed: to NAME.nii or
// NAME.nii.gz the uint8 label volume with the input's NIfTI geometry
// (spacing, orientation, origin), so a viewer overlays it on the image; to
// HDF5 `segmentation` (D, H, W) uint8, the arg-max class, and with
// --probabilities also `probabilities` (K, D, H, W) float32. When the case
// has labels, the Dice of each class against them is printed. Rank 0 holds
// the whole probability volume.
#pragma once
#include <array>
#include <string>

#include "hybrid3d/parallel/comm.hpp"
#include "hybrid3d/train/predict_options.hpp"

namespace h3d {

// Collective over `world`. UsageError (identical on every rank) for bad
// options or inputs, before any window is computed.
void predict_volume(const Comm& world, const PredictOptions& o);

}  // namespace h3d
