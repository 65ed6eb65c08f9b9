// The parameters of the backend's per-element ops that need more than a
// few scalars (backend.hpp): dropout's counter-based mask, the optimizer
// updates, the softmax losses' per-voxel parts. Plain values, so that a
// device backend can copy them into a kernel's arguments.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "hybrid3d/core/box.hpp"

namespace h3d {

// Element i of local sample s is kept (and scaled by 1/(1-p)) when
// uniform01(seed, stream, sample_counter[s] + g) >= p, where g is the
// element's index inside its global sample: for a spatial activation
// [C, box] of a [C, global] volume, the global NCDHW offset of the cell; for
// a dense one, i itself. The mask is thus the same whatever the layout.
struct DropoutDesc {
  float p = 0.0f;
  uint64_t seed = 0, stream = 0;
  std::vector<uint64_t> sample_counter;  // per local sample: the counter of its element 0
  int64_t per_sample = 0;                // local elements of one sample
  bool spatial = false;
  Box box;                          // spatial: this rank's block (global coordinates)
  std::array<int64_t, 3> global{};  // spatial: the volume's extents

  // The counter of local element i of sample s (every backend draws from it).
  uint64_t counter(size_t s, int64_t i) const {
    if (!spatial) return sample_counter[s] + uint64_t(i);
    const auto b = box.extents();
    const int64_t w = i % b[2], h = (i / b[2]) % b[1], z = (i / (b[2] * b[1])) % b[0], c = i / (b[0] * b[1] * b[2]);
    const int64_t g = ((c * global[0] + z + box.r[0].lo) * global[1] + h + box.r[1].lo) * global[2] + w + box.r[2].lo;
    return sample_counter[s] + uint64_t(g);
  }
};

// SGD (PyTorch's): g = grad + weight_decay * w; with momentum, v = g on the
// first step and momentum * v + g after; w -= lr * (v or g).
struct SgdStep {
  float lr = 0, weight_decay = 0, momentum = 0;
  bool first = false;  // the velocity's first step (it starts as g)
};

// Adam (PyTorch's, L2 weight decay): m and v are the moments; the step is
// w -= lr_over_c1 * m / (sqrt(v / c2) + eps), c1 and c2 the bias
// corrections 1 - beta^t. The factors are given as the optimizer rounds
// them, so that every backend computes the same floats.
struct AdamStep {
  float beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0, weight_decay = 0, lr_over_c1 = 0;
  double c2 = 1, eps = 0;
};

// One element of each update, shared by the backends so that they compute
// the same floats whatever order or threads they run the elements in.
inline void sgd_element(const SgdStep& s, float& w, float grad, float* velocity) {
  const float g = grad + s.weight_decay * w;
  if (!velocity) {
    w -= s.lr * g;
    return;
  }
  *velocity = s.first ? g : s.momentum * *velocity + g;
  w -= s.lr * *velocity;
}

inline void adam_element(const AdamStep& s, float& w, float grad, float& m, float& v) {
  const float g = grad + s.weight_decay * w;
  m = s.beta1 * m + s.one_minus_beta1 * g;
  v = s.beta2 * v + s.one_minus_beta2 * g * g;
  const float denom = float(std::sqrt(double(v) / s.c2) + s.eps);
  w -= s.lr_over_c1 * m / denom;
}

// Softmax over the K channels of each voxel of one sample's logits
// [K, volume], with labels [volume]; voxels labelled ignore_label or
// outside 0..K-1 count nowhere. class_weights: K values, or null for 1.
struct SoftmaxLossDesc {
  int64_t classes = 0, volume = 0;
  int ignore_label = -1;
  const float* class_weights = nullptr;
};
// The gradient's global constants (train/seg_loss.cpp): with ce, each
// voxel's cross-entropy gradient is w_y / ce_total * ce_factor * (p - onehot);
// with dice, dL/dp_k = -dice_factor / K * (2 g_k D_k - I2_k) / D_k^2, taken
// through the softmax (dice_denom = D, dice_i2 = 2 I + eps, K values each).
struct SoftmaxLossGrad {
  bool ce = false, dice = false;
  double ce_total = 0, ce_factor = 0, dice_factor = 0;
  const double* dice_denom = nullptr;
  const double* dice_i2 = nullptr;
};

}  // namespace h3d
