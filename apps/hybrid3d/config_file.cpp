#include "config_file.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "hybrid3d/core/error.hpp"

namespace h3d {

namespace {

constexpr size_t kMaxBytes = size_t(1) << 20;

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

bool is_key(const std::string& k) {
  if (k.empty() || k.size() > 64) return false;
  for (char c : k)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return false;
  return std::isalpha(static_cast<unsigned char>(k[0]));
}

// A value up to an unquoted comment: "text", 'text', [a, b], or bare text.
std::string value_of(const std::string& raw, const std::string& where) {
  std::string v = trim(raw);
  if (!v.empty() && (v[0] == '"' || v[0] == '\'')) {
    const size_t close = v.find(v[0], 1);
    if (close == std::string::npos) H3D_THROW(UsageError, where << ": a quote is not closed");
    const std::string rest = trim(v.substr(close + 1));
    if (!rest.empty() && rest[0] != '#' && rest[0] != ';')
      H3D_THROW(UsageError, where << ": unexpected text after the quoted value");
    return v.substr(1, close - 1);
  }
  v = trim(v.substr(0, std::min(v.find('#'), v.find(';'))));
  if (!v.empty() && v[0] == '[') {
    if (v.back() != ']') H3D_THROW(UsageError, where << ": a list must end with ']' on the same line");
    std::string out, item;
    std::stringstream items(v.substr(1, v.size() - 2));
    while (std::getline(items, item, ',')) {
      item = trim(item);
      if (item.size() >= 2 && (item[0] == '"' || item[0] == '\'') && item.back() == item[0])
        item = item.substr(1, item.size() - 2);
      if (item.empty()) continue;
      out += (out.empty() ? "" : ",") + item;
    }
    return out;
  }
  return v;
}

}  // namespace

std::vector<ConfigEntry> parse_config_text(const std::string& text, const std::string& path,
                                           const std::string& section) {
  H3D_USAGE_CHECK(text.size() <= kMaxBytes, "--config '" << path << "' is larger than 1 MiB; a flag file is small");
  H3D_USAGE_CHECK(text.find('\0') == std::string::npos, "--config '" << path << "' is not a text file");
  std::vector<ConfigEntry> out;
  std::istringstream in(text);
  std::string line, current;  // current: the [section] we are in ("" before any)
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string where = "--config '" + path + "' line " + std::to_string(n);
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t[0] == '[') {
      const size_t close = t.find(']');
      H3D_USAGE_CHECK(close != std::string::npos, where << ": a section header must end with ']'");
      current = trim(t.substr(1, close - 1));
      H3D_USAGE_CHECK(is_key(current), where << ": '" << current << "' is not a section name (train, predict, ...)");
      continue;
    }
    const size_t eq = t.find('=');
    H3D_USAGE_CHECK(eq != std::string::npos, where << ": expected 'name = value'");
    ConfigEntry e;
    e.key = trim(t.substr(0, eq));
    if (e.key.rfind("--", 0) == 0) e.key = e.key.substr(2);
    H3D_USAGE_CHECK(is_key(e.key), where << ": '" << e.key << "' is not a flag name");
    e.value = value_of(t.substr(eq + 1), where);
    e.line = n;
    e.shared = current.empty();
    if (current.empty() || current == section) out.push_back(std::move(e));
  }
  return out;
}

std::string read_config_file(const std::string& path) {
  struct stat st {};
  H3D_USAGE_CHECK(::stat(path.c_str(), &st) == 0, "--config '" << path << "' cannot be read: " << std::strerror(errno));
  H3D_USAGE_CHECK(S_ISREG(st.st_mode), "--config '" << path << "' is not a regular file");
  std::ifstream f(path, std::ios::binary);
  H3D_USAGE_CHECK(f, "--config '" << path << "' cannot be read: " << std::strerror(errno));
  std::string text;
  char buf[4096];
  while (f.read(buf, sizeof buf) || f.gcount() > 0) {
    text.append(buf, size_t(f.gcount()));
    H3D_USAGE_CHECK(text.size() <= kMaxBytes, "--config '" << path << "' is larger than 1 MiB; a flag file is small");
  }
  return text;
}

}  // namespace h3d
