// The --spatial flag's value, "DxHxW" (for example 2x1x1): the blocks each
// sample is cut into along D, H and W. Light (no MPI): the command line
// parses it before any rank talks to another.
#pragma once
#include <array>
#include <string>

namespace h3d {

// UsageError for anything but three positive integers joined by 'x'.
std::array<int, 3> parse_spatial(const std::string& s);

}  // namespace h3d
