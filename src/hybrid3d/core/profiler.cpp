#include "hybrid3d/core/profiler.hpp"

namespace h3d {

Profiler& Profiler::instance() {
  static Profiler p;
  return p;
}

}  // namespace h3d
