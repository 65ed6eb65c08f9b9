// The segmentation task: a per-voxel loss over every rank's voxels of the
// global mini-batch (train/seg_loss.hpp), Dice / IoU / accuracy to judge it
// (train/task.hpp).
#include <cmath>
#include <cstdio>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/train/seg_loss.hpp"
#include "hybrid3d/train/task.hpp"

namespace h3d {

namespace {

class SegmentationTask : public Task {
 public:
  SegmentationTask(const TrainOptions& o) : model_(o.model.model), classes_(o.model.classes), loss_(o.seg_loss),
                                           exact_(o.deterministic) {}

  void validate(const SampleSource& data) const override {
    H3D_USAGE_CHECK(data.classes() > 0, "--model " << model_ << " segments, but the data (" << data.describe()
                                                   << ") has no labels");
    H3D_USAGE_CHECK(data.classes() <= classes_,
                    "the data has " << data.classes() << " classes, more than --classes " << classes_);
    loss_.validate(classes_);  // after the data: a class count the data refutes is named first
  }

  double loss(Backend& backend, const ProcessGrid& grid, const Tensor& output, const std::vector<float>& targets,
              Tensor& dout) override {
    labels_.assign(targets.begin(), targets.end());
    return segmentation_loss(backend, grid.world(), loss_, output, labels_, dout, exact_).loss;
  }

  void eval_begin() override {
    metrics_ = SegMetrics(classes_);
    samples_ = 0;
  }

  void eval_add(const Tensor& y, const std::vector<float>& t, const std::vector<float>& weights) override {
    labels_.assign(t.begin(), t.end());
    metrics_.add(y, labels_, loss_.ignore_label, weights);
    for (float w : weights) samples_ += w;
  }

  ValidationResult eval_finish(const ProcessGrid& grid) override {
    grid.replicas().allreduce_sum(&samples_, 1);
    metrics_.reduce(grid.world());
    ValidationResult r;
    r.samples = int64_t(samples_);
    for (int64_t c = 0; c < metrics_.classes(); ++c) r.dice.push_back(metrics_.dice(c)), r.iou.push_back(metrics_.iou(c));
    r.accuracy = metrics_.accuracy();
    return r;
  }

  std::string report(const ValidationResult& v) const override {
    std::string dice, iou;
    for (size_t c = 0; c < v.dice.size(); ++c) {
      char d[32];
      std::snprintf(d, sizeof d, " %.4f", v.dice[c]);
      dice += d;
      std::snprintf(d, sizeof d, " %.4f", v.iou[c]);
      iou += d;
    }
    char buf[512];
    std::snprintf(buf, sizeof buf, "dice per class%s, iou%s, voxel accuracy %.4f, %lld samples", dice.c_str(),
                  iou.c_str(), v.accuracy, (long long)v.samples);
    return buf;
  }

  nlohmann::json record(const ValidationResult& v) const override {
    // NaN (a class absent from truth and prediction) is null in JSON.
    auto finite_or_null = [](const std::vector<double>& xs) {
      nlohmann::json a = nlohmann::json::array();
      for (double x : xs) a.push_back(std::isfinite(x) ? nlohmann::json(x) : nlohmann::json());
      return a;
    };
    return {{"dice", finite_or_null(v.dice)}, {"iou", finite_or_null(v.iou)}, {"accuracy", v.accuracy},
            {"samples", v.samples}};
  }

 private:
  std::string model_;
  int64_t classes_;
  SegLossOptions loss_;
  bool exact_;
  std::vector<int32_t> labels_;
  SegMetrics metrics_;
  double samples_ = 0;
};

}  // namespace

std::unique_ptr<Task> make_segmentation_task(const TrainOptions& o) { return std::make_unique<SegmentationTask>(o); }

}  // namespace h3d
