#include "hybrid3d/train/safetensors.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "hybrid3d/core/error.hpp"

namespace h3d {

using json = nlohmann::json;

void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  json meta = json::object();
  for (auto& kv : metadata) meta[kv.first] = kv.second;
  meta["format"] = "pt";
  header["__metadata__"] = meta;
  uint64_t off = 0;
  for (auto& t : tensors) {
    uint64_t bytes = uint64_t(t.tensor->numel()) * (t.as_int64 ? 8 : 4);
    // An integer counter (num_batches_tracked) is a 0-dim tensor in PyTorch.
    const std::vector<int64_t> shape =
        t.as_int64 && t.tensor->numel() == 1 ? std::vector<int64_t>{} : t.tensor->shape();
    header[t.name] = {{"dtype", t.as_int64 ? "I64" : "F32"}, {"shape", shape}, {"data_offsets", {off, off + bytes}}};
    off += bytes;
  }
  std::string h = header.dump();
  while ((h.size() + 8) % 8) h += ' ';  // keep the data 8-byte aligned
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) H3D_THROW(Error, "cannot write '" << tmp << "': " << std::strerror(errno));
    uint64_t n = h.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    f.write(reinterpret_cast<const char*>(len), 8);
    f.write(h.data(), std::streamsize(h.size()));
    for (auto& t : tensors) {
      if (t.as_int64) {
        std::vector<int64_t> v(size_t(t.tensor->numel()));
        for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t(std::llround((*t.tensor)[int64_t(i)]));
        f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * 8));
      } else {
        f.write(reinterpret_cast<const char*>(t.tensor->data()), std::streamsize(t.tensor->numel() * 4));
      }
    }
    f.flush();
    if (!f) {
      const int err = errno;
      std::remove(tmp.c_str());
      H3D_THROW(Error, "writing '" << tmp << "' failed: " << std::strerror(err));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    H3D_THROW(Error, "cannot rename '" << tmp << "' to '" << path << "': " << std::strerror(errno));
  }
}

namespace {

// Where a file's bytes come from: read(offset, n, dst) returns false when
// fewer than n bytes are there.
using ReadAt = std::function<bool(uint64_t offset, size_t n, char* dst)>;

// Every size and offset is checked against `file_size` before anything is
// allocated or read, so the largest allocation is bounded by the file.
std::map<std::string, LoadedTensor> decode(uint64_t file_size, const ReadAt& read, const std::string& what) {
  auto bad = [&](const std::string& why) -> void {
    H3D_THROW(UsageError, "'" << what << "' is not a valid safetensors file: " << why);
  };
  if (file_size < 8) bad("shorter than its 8-byte header length");
  unsigned char len[8];
  if (!read(0, 8, reinterpret_cast<char*>(len))) bad("cannot read its header length");
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= uint64_t(len[i]) << (8 * i);
  if (hlen > file_size - 8 || hlen > (100u << 20)) bad("header length " + std::to_string(hlen) + " exceeds the file");
  std::string h(size_t(hlen), '\0');
  if (hlen > 0 && !read(8, size_t(hlen), &h[0])) bad("cannot read its header");
  json header;
  try {
    header = json::parse(h);
  } catch (const std::exception& e) {
    bad(std::string("header is not JSON: ") + e.what());
  }
  if (!header.is_object()) bad("header is not a JSON object");
  const uint64_t data_size = file_size - 8 - hlen;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  std::map<std::string, LoadedTensor> out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const json& e = it.value();
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      bad("entry '" + it.key() + "' lacks dtype, shape or data_offsets");
    std::string dtype = e["dtype"].is_string() ? e["dtype"].get<std::string>() : "";
    size_t esize = dtype == "F32" || dtype == "I32" ? 4 : dtype == "F64" || dtype == "I64" ? 8 : 0;
    if (!esize) bad("entry '" + it.key() + "' has dtype '" + dtype + "' (supported: F32, F64, I32, I64)");
    if (!e["shape"].is_array() || e["shape"].size() > 8) bad("entry '" + it.key() + "' has a bad shape");
    LoadedTensor t;
    uint64_t count = 1;
    for (auto& d : e["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 40)) bad("entry '" + it.key() + "' has a bad shape");
      t.shape.push_back(d.get<int64_t>());
      count *= d.get<uint64_t>();
      if (count > (uint64_t(1) << 40)) bad("entry '" + it.key() + "' is impossibly large");
    }
    const json& o = e["data_offsets"];
    if (!o.is_array() || o.size() != 2 || !o[0].is_number_unsigned() || !o[1].is_number_unsigned())
      bad("entry '" + it.key() + "' has bad data_offsets");
    uint64_t b = o[0], end = o[1];
    if (b > end || end > data_size) bad("entry '" + it.key() + "' has offsets past the end of the file");
    if (end - b != count * esize) bad("entry '" + it.key() + "' has " + std::to_string(end - b) + " bytes for its shape");
    spans.push_back({b, end});
    std::vector<char> raw(size_t(end - b));
    if (!raw.empty() && !read(8 + hlen + b, raw.size(), raw.data())) bad("entry '" + it.key() + "' could not be read");
    t.data.resize(size_t(count));
    for (size_t i = 0; i < count; ++i) {
      const char* p = raw.data() + i * esize;
      if (dtype == "F32") { float v; std::memcpy(&v, p, 4); t.data[i] = v; }
      if (dtype == "F64") { double v; std::memcpy(&v, p, 8); t.data[i] = float(v); }
      if (dtype == "I32") { int32_t v; std::memcpy(&v, p, 4); t.data[i] = float(v); }
      if (dtype == "I64") { int64_t v; std::memcpy(&v, p, 8); t.data[i] = float(v); }
    }
    out[it.key()] = std::move(t);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second) bad("two tensors overlap");
  return out;
}

}  // namespace

std::map<std::string, LoadedTensor> load_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) H3D_THROW(UsageError, "cannot open safetensors file '" << path << "': " << std::strerror(errno));
  f.seekg(0, std::ios::end);
  const std::streamoff end = f.tellg();
  if (end < 0) H3D_THROW(UsageError, "cannot read safetensors file '" << path << "' (not a regular file?)");
  return decode(uint64_t(end), [&](uint64_t off, size_t n, char* dst) {
    f.clear();
    f.seekg(std::streamoff(off));
    f.read(dst, std::streamsize(n));
    return bool(f);
  }, path);
}

std::map<std::string, LoadedTensor> parse_safetensors(const char* bytes, size_t size, const std::string& what) {
  return decode(size, [&](uint64_t off, size_t n, char* dst) {
    if (off > size || n > size - off) return false;
    std::memcpy(dst, bytes + off, n);
    return true;
  }, what);
}

}  // namespace h3d
