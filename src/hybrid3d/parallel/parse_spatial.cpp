#include "hybrid3d/parallel/parse_spatial.hpp"

#include <sstream>

#include "hybrid3d/core/error.hpp"

namespace h3d {

std::array<int, 3> parse_spatial(const std::string& s) {
  std::array<int, 3> out{};
  char x1 = 0, x2 = 0;
  std::istringstream is(s);
  std::string rest;
  if (!(is >> out[0] >> x1 >> out[1] >> x2 >> out[2]) || x1 != 'x' || x2 != 'x' || (is >> rest)) {
    H3D_THROW(UsageError, "--spatial '" << s << "' is not of the form DxHxW (for example 2x1x1)");
  }
  for (int v : out) H3D_USAGE_CHECK(v >= 1 && v <= 4096, "--spatial '" << s << "': each factor must be 1..4096");
  return out;
}

}  // namespace h3d
