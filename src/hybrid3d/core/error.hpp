// Errors: library code throws; only main() decides how the job ends.
//
// Error      - something went wrong on this rank (I/O, a kernel, MPI).
// UsageError - a problem every rank detects identically (a flag, a layout
//              that cannot split a layer): main() prints it once, on rank 0,
//              and every rank exits non-zero without MPI_Abort.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace h3d {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class UsageError : public Error {
 public:
  using Error::Error;
};

namespace detail {
inline std::string where(const char* file, int line) {
  std::string f(file);
  for (const char* root : {"src/hybrid3d/", "apps/hybrid3d/"}) {
    const auto pos = f.rfind(root);
    if (pos != std::string::npos) return f.substr(pos + std::string(root).find('/') + 1) + ":" + std::to_string(line);
  }
  return f + ":" + std::to_string(line);
}
}  // namespace detail

}  // namespace h3d

// H3D_THROW(Type, message stream expression)
#define H3D_THROW(Type, msg)                                                   \
  do {                                                                         \
    std::ostringstream h3d_os_;                                                \
    h3d_os_ << msg << " [" << ::h3d::detail::where(__FILE__, __LINE__) << "]"; \
    throw Type(h3d_os_.str());                                                 \
  } while (0)

#define H3D_CHECK(cond, msg)                  \
  do {                                        \
    if (!(cond)) H3D_THROW(::h3d::Error, msg); \
  } while (0)

#define H3D_USAGE_CHECK(cond, msg)                 \
  do {                                             \
    if (!(cond)) H3D_THROW(::h3d::UsageError, msg); \
  } while (0)
