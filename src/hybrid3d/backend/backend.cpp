#include "hybrid3d/backend/backend.hpp"

#include "hybrid3d/backend/cpu/cpu_backend.hpp"
#include "hybrid3d/core/error.hpp"

namespace h3d {

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") return std::make_unique<CpuBackend>();
  if (name == "ref") return std::make_unique<RefBackend>();
  H3D_THROW(UsageError, "--backend '" << name << "' is unknown; use cpu (oneDNN) or ref (reference loops)");
}

}  // namespace h3d
