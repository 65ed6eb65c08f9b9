// MetricsLog: JSON lines, one record per training step and per validation,
// written by rank 0 only and flushed line by line (so a killed job keeps
// every finished record).
#pragma once
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace h3d {

class MetricsLog {
 public:
  MetricsLog() = default;
  // Empty path: no file. Opens (truncates, or appends for a resumed run)
  // on the writing rank only.
  void open(const std::string& path, bool writer, bool append = false);
  void write(const nlohmann::json& record);

 private:
  std::ofstream out_;
  bool enabled_ = false;
};

}  // namespace h3d
