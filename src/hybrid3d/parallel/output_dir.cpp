#include "hybrid3d/parallel/output_dir.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "hybrid3d/core/error.hpp"

namespace h3d {

namespace {

// mkdir -p; returns what went wrong, or nothing.
std::string make_directories(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos < path.size() && path[pos] != '/') continue;
    const std::string part = path.substr(0, pos);
    if (::mkdir(part.c_str(), 0777) != 0 && errno != EEXIST) return "cannot create '" + part + "': " + std::strerror(errno);
  }
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "'" + path + "' is not a directory";
  if (::access(path.c_str(), W_OK) != 0) return "'" + path + "' is not writable";
  return "";
}

}  // namespace

void create_output_dir(const Comm& comm, const std::string& path, const char* flag) {
  H3D_USAGE_CHECK(!path.empty(), flag << " needs a directory");
  char error[512] = {};
  if (comm.rank() == 0) std::snprintf(error, sizeof error, "%s", make_directories(path).c_str());
  comm.bcast(error, sizeof error, 0);
  H3D_USAGE_CHECK(error[0] == 0, flag << ": " << error);
}

void require_writable_parent(const char* flag, const std::string& path) {
  if (path.empty()) return;
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, std::max<size_t>(slash, 1));
  H3D_USAGE_CHECK(::access(dir.c_str(), W_OK) == 0,
                  flag << " '" << path << "': directory '" << dir << "' does not exist or is not writable");
}

}  // namespace h3d
