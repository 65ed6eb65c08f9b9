// The backends this build has, by name: the one place that knows them.
// `--backend`'s help, make_backend() and the op harness
// (tests/unit/backend_ops_test.cpp, every op of every entry against "ref")
// all read this list, so a new backend is its folder plus one entry in
// registry.cpp.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hybrid3d/backend/backend.hpp"

namespace h3d {

struct BackendEntry {
  std::string name;         // what --backend takes
  std::string description;  // one line for --help
  std::function<std::unique_ptr<Backend>()> make;
};

// In registration order; "ref" (the oracle) is always there.
const std::vector<BackendEntry>& backend_registry();
std::vector<std::string> backend_names();
// "cpu (oneDNN) | ref (reference loops)": the names with their descriptions.
std::string backend_help();
// Throws UsageError naming the registered backends for an unknown name.
std::unique_ptr<Backend> make_backend(const std::string& name);

}  // namespace h3d
