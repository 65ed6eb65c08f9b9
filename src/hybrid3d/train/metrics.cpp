#include "hybrid3d/train/metrics.hpp"

#include <cstring>

#include "hybrid3d/core/error.hpp"

namespace h3d {

void MetricsLog::open(const std::string& path, bool writer, bool append) {
  enabled_ = writer && !path.empty();
  if (!enabled_) return;
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  if (!out_) H3D_THROW(Error, "--metrics: cannot write '" << path << "': " << std::strerror(errno));
}

void MetricsLog::write(const nlohmann::json& record) {
  if (!enabled_) return;
  out_ << record.dump() << '\n';
  out_.flush();
}

}  // namespace h3d
