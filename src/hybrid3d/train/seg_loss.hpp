// Per-voxel segmentation losses and metrics over a spatially distributed
// mini-batch. Every rank holds logits [n, K, block] and labels [n, block]
// for its own block of its data group's samples; every sum below runs over
// all voxels of all samples of the global mini-batch (one allreduce over
// `comm`, the whole job), so the values are those of one process holding
// everything, whatever the layout.
//
//  - Cross-entropy (PyTorch's CrossEntropyLoss, reduction 'mean'): with
//    class weights w, sum_i w[y_i] * -log softmax(z_i)[y_i] / sum_i w[y_i];
//    voxels labelled `ignore_label` count nowhere.
//  - Soft Dice (per class, then averaged over the K classes): with p the
//    softmax and g the one-hot labels, dice_c = (2 sum p_c g_c + eps) /
//    (sum p_c + sum g_c + eps), loss 1 - mean_c dice_c. The sums cover the
//    whole global batch volume (MONAI's DiceLoss with batch=True), not a
//    block or a sample.
//  - ce+dice: ce_weight * CE + dice_weight * Dice.
// The gradient w.r.t. the logits is exact for each (checked against finite
// differences in tests/unit/seg_loss_test.cpp).
//
// Metrics from the arg-max labels: per class Dice 2TP / (2TP + FP + FN) and
// IoU TP / (TP + FP + FN) (NaN for a class absent from both), and voxel
// accuracy; counts are summed over ranks and over calls (a whole
// validation pass) before the ratios are taken.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "hybrid3d/backend/backend.hpp"
#include "hybrid3d/core/tensor.hpp"
#include "hybrid3d/parallel/comm.hpp"
#include "hybrid3d/train/seg_loss_options.hpp"

namespace h3d {

struct SegLossValue {
  double loss = 0, ce = 0, dice_loss = 0;
};

// Loss of the global mini-batch and dlogits (same shape as logits) for
// this rank's part. Collective over `comm`. `exact` (--deterministic): the
// global sums are added exactly, so they do not depend on how the voxels
// are split over ranks. The per-voxel work runs on `backend`.
SegLossValue segmentation_loss(Backend& backend, const Comm& comm, const SegLossOptions& o, const Tensor& logits,
                               const std::vector<int32_t>& labels, Tensor& dlogits, bool exact = false);

class SegMetrics {
 public:
  explicit SegMetrics(int64_t classes = 0) : tp_(size_t(classes)), fp_(size_t(classes)), fn_(size_t(classes)) {}
  // Adds this rank's voxels (weight: 1 per sample, 0 to skip a padded one).
  void add(const Tensor& logits, const std::vector<int32_t>& labels, int ignore_label,
           const std::vector<float>& sample_weights = {});
  // Sums the counts over `comm` (collective); then the ratios below are global.
  void reduce(const Comm& comm);
  int64_t classes() const { return int64_t(tp_.size()); }
  double dice(int64_t c) const;
  double iou(int64_t c) const;
  double accuracy() const { return total_ > 0 ? correct_ / total_ : 0.0; }
  double voxels() const { return total_; }

 private:
  std::vector<double> tp_, fp_, fn_;
  double correct_ = 0, total_ = 0;
};

}  // namespace h3d
