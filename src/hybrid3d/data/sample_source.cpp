#include "hybrid3d/data/sample_source.hpp"

#include <cmath>

#include "hybrid3d/core/error.hpp"

namespace h3d {

InputTransform parse_transform(const std::string& s) {
  if (s == "log1p") return InputTransform::kLog1p;
  if (s == "none") return InputTransform::kNone;
  H3D_THROW(UsageError, "--transform '" << s << "' is unknown; use log1p or none");
}

void apply_transform(InputTransform t, float* data, int64_t n) {
  if (t == InputTransform::kNone) return;
  for (int64_t i = 0; i < n; ++i) data[i] = std::log1p(std::max(data[i], 0.0f));
}

}  // namespace h3d
