#include "hybrid3d/core/bytes.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "hybrid3d/core/error.hpp"

namespace h3d {

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : (std::fabs(v) < 10 ? "%.2f %s" : "%.1f %s"), v, units[u]);
  return buf;
}

int64_t parse_bytes(const std::string& text, const std::string& flag) {
  const char* s = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  std::string unit;
  for (const char* p = end; p && *p; ++p)
    if (!std::isspace(static_cast<unsigned char>(*p))) unit += char(std::tolower(static_cast<unsigned char>(*p)));
  double scale = 0;
  if (unit == "b") scale = 1;
  if (unit == "kib") scale = 1024.0;
  if (unit == "mib") scale = 1024.0 * 1024;
  if (unit == "gib") scale = 1024.0 * 1024 * 1024;
  if (unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  if (unit == "kb") scale = 1e3;
  if (unit == "mb") scale = 1e6;
  if (unit == "gb") scale = 1e9;
  if (unit == "tb") scale = 1e12;
  H3D_USAGE_CHECK(end != s && std::isfinite(v) && v > 0 && scale > 0 && v * scale < 9e18,
                  flag << " '" << text << "' is not a memory size; give a positive number with a unit, "
                       << "for example 1500MiB or 2GiB");
  return int64_t(v * scale);
}

namespace {

// A number in a cgroup file ("max" or unreadable: -1).
int64_t cgroup_value(const char* path) {
  std::ifstream f(path);
  std::string v;
  if (!(f >> v) || v == "max") return -1;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  return end && *end == 0 ? int64_t(x) : -1;
}

}  // namespace

int64_t available_memory_bytes() {
  int64_t avail = 0;
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  int64_t kb = 0;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") avail = kb * 1024;
  if (avail <= 0) avail = int64_t(sysconf(_SC_AVPHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE));
  // cgroup v2, then v1: the limit less what the group already uses.
  int64_t limit = cgroup_value("/sys/fs/cgroup/memory.max"), used = cgroup_value("/sys/fs/cgroup/memory.current");
  if (limit < 0) {
    limit = cgroup_value("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    used = cgroup_value("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  }
  if (limit > 0 && limit < (int64_t(1) << 60)) avail = std::min(avail, limit - std::max<int64_t>(0, used));
  return std::max<int64_t>(0, avail);
}

}  // namespace h3d
