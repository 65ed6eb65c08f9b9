#include "hybrid3d/train/seg_loss.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/parallel/exact_sum.hpp"

namespace h3d {

void SegLossOptions::validate(int64_t classes) const {
  H3D_USAGE_CHECK(kind == "ce" || kind == "dice" || kind == "ce+dice",
                  "--loss '" << kind << "' is unknown; use ce, dice or ce+dice");
  H3D_USAGE_CHECK(class_weights.empty() || int64_t(class_weights.size()) == classes,
                  "--class-weights has " << class_weights.size() << " values for " << classes << " classes");
  for (float w : class_weights) H3D_USAGE_CHECK(w >= 0 && std::isfinite(w), "--class-weights must be >= 0");
}

namespace {

bool counted(int32_t y, int ignore, int64_t K) { return y != ignore && y >= 0 && y < K; }

}  // namespace

SegLossValue segmentation_loss(Backend& backend, const Comm& comm, const SegLossOptions& o, const Tensor& logits,
                               const std::vector<int32_t>& labels, Tensor& dlogits, bool exact) {
  const int64_t n = logits.dim(0), K = logits.dim(1), vol = logits.numel() / std::max<int64_t>(1, n * K);
  H3D_CHECK(int64_t(labels.size()) == n * vol, "segmentation loss: " << labels.size() << " labels for " << n * vol
                                                                       << " voxels");
  const bool ce = o.kind != "dice", dice = o.kind != "ce";
  SoftmaxLossDesc desc;
  desc.classes = K;
  desc.volume = vol;
  desc.ignore_label = o.ignore_label;
  desc.class_weights = o.class_weights.empty() ? nullptr : o.class_weights.data();
  // Pass 1: the global sums: CE numerator and weight, and per class I, P, G.
  // (The last slot counts labels outside the classes: every rank learns of
  // them in the same reduction, and all stop together.)
  std::vector<double> sums(size_t(3 + 3 * K), 0.0);
  for (int32_t y : labels) sums.back() += (y != o.ignore_label && (y < 0 || y >= K)) ? 1.0 : 0.0;
  // Exact: every term is at most max(1, largest weight) * 691 (-log 1e-300).
  ExactSum exact_sums;
  if (exact) {
    double wmax = 1;
    for (float w : o.class_weights) wmax = std::max(wmax, double(w));
    exact_sums.reset(int64_t(sums.size()) - 1, double(comm.allreduce_sum(int64_t(labels.size()))) * wmax * 691.0);
  }
  // Exact: each voxel's terms on their own (a sum of one term is the term),
  // each added exactly; otherwise the backend adds them up in voxel order.
  std::vector<double> terms(sums.size() - 1);
  for (int64_t s = 0; s < n; ++s) {
    const float* z = logits.data() + s * K * vol;
    const int32_t* y = labels.data() + s * vol;
    if (!exact) {
      backend.softmax_loss_sums(desc, z, y, 0, vol, sums.data());
      continue;
    }
    for (int64_t v = 0; v < vol; ++v) {
      if (!counted(y[v], o.ignore_label, K)) continue;
      std::fill(terms.begin(), terms.end(), 0.0);
      backend.softmax_loss_sums(desc, z, y, v, v + 1, terms.data());
      for (size_t t = 0; t < terms.size(); ++t) exact_sums.add(int64_t(t), terms[t]);
    }
  }
  if (exact) {
    exact_sums.allreduce(comm);
    for (int64_t i = 0; i < exact_sums.size(); ++i) sums[size_t(i)] = exact_sums.value(i);
    sums.back() = double(comm.allreduce_sum(int64_t(sums.back())));
  } else {
    comm.allreduce_sum(sums.data(), int64_t(sums.size()));
  }
  H3D_USAGE_CHECK(sums.back() == 0, int64_t(sums.back()) << " voxel labels of the mini-batch are outside the " << K
                                                          << " classes 0.." << K - 1
                                                          << "; set --classes, or --ignore-label for a void label");
  SegLossValue r;
  const double W = sums[1];
  std::vector<double> dice_c(static_cast<size_t>(K)), denom(static_cast<size_t>(K));
  if (ce) r.ce = W > 0 ? sums[0] / W : 0.0;
  if (dice) {
    double mean = 0;
    for (int64_t k = 0; k < K; ++k) {
      denom[size_t(k)] = sums[size_t(2 + K + k)] + sums[size_t(2 + 2 * K + k)] + o.dice_eps;
      dice_c[size_t(k)] = (2 * sums[size_t(2 + k)] + o.dice_eps) / denom[size_t(k)];
      mean += dice_c[size_t(k)] / double(K);
    }
    r.dice_loss = 1.0 - mean;
  }
  r.loss = (ce ? (o.kind == "ce" ? 1.0 : o.ce_weight) * r.ce : 0.0) +
           (dice ? (o.kind == "dice" ? 1.0 : o.dice_weight) * r.dice_loss : 0.0);
  const double a_ce = o.kind == "ce" ? 1.0 : o.ce_weight, a_dice = o.kind == "dice" ? 1.0 : o.dice_weight;

  // Pass 2: the gradient. CE: w_y (p - onehot) / W. Dice: dL/dp_k =
  // -(1/K) (2 g_k D_k - (2 I_k + eps)) / D_k^2, then through the softmax.
  std::vector<double> i2(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) i2[size_t(k)] = 2 * sums[size_t(2 + k)] + o.dice_eps;
  SoftmaxLossGrad grad;
  grad.ce = ce && W > 0;
  grad.ce_total = W;
  grad.ce_factor = a_ce;
  grad.dice = dice;
  grad.dice_factor = a_dice;
  grad.dice_denom = denom.data();
  grad.dice_i2 = i2.data();
  dlogits.set_allocator(logits.allocator());
  dlogits.reshape_uninit(logits.shape());
  for (int64_t s = 0; s < n; ++s)
    backend.softmax_loss_grad(desc, grad, logits.data() + s * K * vol, labels.data() + s * vol,
                              dlogits.data() + s * K * vol);
  return r;
}

void SegMetrics::add(const Tensor& logits, const std::vector<int32_t>& labels, int ignore_label,
                     const std::vector<float>& sample_weights) {
  const int64_t n = logits.dim(0), K = logits.dim(1), vol = logits.numel() / std::max<int64_t>(1, n * K);
  H3D_CHECK(K == classes(), "metrics for " << classes() << " classes given " << K);
  for (int64_t s = 0; s < n; ++s) {
    const double w = sample_weights.empty() ? 1.0 : double(sample_weights[size_t(s)]);
    if (w == 0) continue;
    const float* z = logits.data() + s * K * vol;
    for (int64_t v = 0; v < vol; ++v) {
      const int32_t y = labels[size_t(s * vol + v)];
      if (!counted(y, ignore_label, K)) continue;
      int64_t best = 0;
      for (int64_t k = 1; k < K; ++k)
        if (z[k * vol + v] > z[best * vol + v]) best = k;
      total_ += w;
      if (best == y) {
        correct_ += w;
        tp_[size_t(y)] += w;
      } else {
        fp_[size_t(best)] += w;
        fn_[size_t(y)] += w;
      }
    }
  }
}

void SegMetrics::reduce(const Comm& comm) {
  std::vector<double> all;
  for (auto* v : {&tp_, &fp_, &fn_}) all.insert(all.end(), v->begin(), v->end());
  all.push_back(correct_);
  all.push_back(total_);
  comm.allreduce_sum(all.data(), int64_t(all.size()));
  const size_t K = tp_.size();
  for (size_t k = 0; k < K; ++k) tp_[k] = all[k], fp_[k] = all[K + k], fn_[k] = all[2 * K + k];
  correct_ = all[3 * K];
  total_ = all[3 * K + 1];
}

double SegMetrics::dice(int64_t c) const {
  const double d = 2 * tp_[size_t(c)] + fp_[size_t(c)] + fn_[size_t(c)];
  return d > 0 ? 2 * tp_[size_t(c)] / d : std::numeric_limits<double>::quiet_NaN();
}

double SegMetrics::iou(int64_t c) const {
  const double d = tp_[size_t(c)] + fp_[size_t(c)] + fn_[size_t(c)];
  return d > 0 ? tp_[size_t(c)] / d : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace h3d
