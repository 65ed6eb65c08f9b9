// Learning-rate schedules, as a function of the step (0-based):
//   constant: lr
//   mlperf:   linear warm-up from lr/warmup to lr over `warmup` steps, then
//             lr * factor_i after each boundary_i (MLPerf HPC CosmoFlow)
//   poly:     warm-up as above, then lr * (1 - t/T)^power down to end_lr
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace h3d {

struct LrSchedule {
  std::string kind = "constant";
  double lr = 1e-3;
  int64_t warmup = 0;
  std::vector<int64_t> boundaries;
  std::vector<double> factors;
  int64_t total_steps = 1;
  double power = 1.0, end_lr = 0.0;

  void validate() const;
  double at(int64_t step) const;
};

}  // namespace h3d
