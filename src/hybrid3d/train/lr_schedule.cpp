#include "hybrid3d/train/lr_schedule.hpp"

#include <cmath>

#include "hybrid3d/core/error.hpp"

namespace h3d {

void LrSchedule::validate() const {
  H3D_USAGE_CHECK(lr > 0 && std::isfinite(lr), "--lr " << lr << " must be positive");
  H3D_USAGE_CHECK(kind == "constant" || kind == "mlperf" || kind == "poly",
                  "--lr-schedule '" << kind << "' is unknown; use constant, mlperf or poly");
  H3D_USAGE_CHECK(boundaries.size() == factors.size(),
                  "--decay-boundaries has " << boundaries.size() << " entries but --decay-factors has "
                                            << factors.size() << "; give one factor per boundary");
  H3D_USAGE_CHECK(warmup >= 0, "--warmup-steps must not be negative");
}

double LrSchedule::at(int64_t step) const {
  if (kind == "constant") return lr;
  if (warmup > 0 && step < warmup) return lr * double(step + 1) / double(warmup);
  if (kind == "mlperf") {
    double f = 1.0;
    for (size_t i = 0; i < boundaries.size(); ++i)
      if (step >= boundaries[i]) f = factors[i];
    return lr * f;
  }
  double span = double(std::max<int64_t>(1, total_steps - warmup));
  double t = std::min(1.0, double(step - warmup) / span);
  return end_lr + (lr - end_lr) * std::pow(1.0 - t, power);
}

}  // namespace h3d
