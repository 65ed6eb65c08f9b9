#include "hybrid3d/backend/registry.hpp"

#include "hybrid3d/backend/cpu/cpu_backend.hpp"
#include "hybrid3d/backend/ref/ref_backend.hpp"
#include "hybrid3d/core/error.hpp"

namespace h3d {

const std::vector<BackendEntry>& backend_registry() {
  static const std::vector<BackendEntry> entries{
      {"cpu", "oneDNN convolutions and GEMMs, OpenMP loops", [] { return std::make_unique<CpuBackend>(); }},
      {"ref", "reference loops, the oracle", [] { return std::make_unique<RefBackend>(); }},
  };
  return entries;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const auto& e : backend_registry()) names.push_back(e.name);
  return names;
}

std::string backend_help() {
  std::string s;
  for (const auto& e : backend_registry()) s += (s.empty() ? "" : " | ") + e.name + " (" + e.description + ")";
  return s;
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  std::string known;
  for (const auto& e : backend_registry()) {
    if (e.name == name) return e.make();
    known += (known.empty() ? "" : ", ") + e.name;
  }
  H3D_THROW(UsageError, "--backend '" << name << "' is unknown; the backends of this build are " << known);
}

}  // namespace h3d
