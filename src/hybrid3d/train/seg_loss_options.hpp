// The segmentation loss and its weights (train/seg_loss.hpp computes it).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace h3d {

struct SegLossOptions {
  std::string kind = "ce";           // ce | dice | ce+dice
  std::vector<float> class_weights;  // cross-entropy weight per class (empty: 1)
  int ignore_label = -1;             // a label value that counts nowhere (-1: none)
  double ce_weight = 1.0, dice_weight = 1.0;
  double dice_eps = 1e-5;
  void validate(int64_t classes) const;  // UsageError for a bad kind or weight count
};

}  // namespace h3d
