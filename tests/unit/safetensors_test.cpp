// safetensors round trip and validation of hostile headers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/train/safetensors.hpp"

using namespace h3d;

namespace {
std::string tmpfile(const std::string& tag) { return "/tmp/h3d_st_" + tag + "_" + std::to_string(getpid()); }

void write_raw(const std::string& path, const std::string& header, size_t data_bytes) {
  std::ofstream f(path, std::ios::binary);
  uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header;
  f << std::string(data_bytes, '\0');
}
}  // namespace

TEST(Safetensors, RoundTrip) {
  Tensor a({2, 3}), b({1});
  for (int i = 0; i < 6; ++i) a[i] = float(i) * 0.5f;
  b[0] = 7;
  std::string p = tmpfile("rt");
  save_safetensors(p, {{"a.weight", &a, false}, {"bn.num_batches_tracked", &b, true}});
  auto m = load_safetensors(p);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m["a.weight"].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(m["a.weight"].data[5], 2.5f);
  EXPECT_EQ(m["bn.num_batches_tracked"].data[0], 7.0f);
  std::remove(p.c_str());
}

TEST(Safetensors, RejectsHostileFiles) {
  std::string p = tmpfile("bad");
  const char* headers[] = {
      R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",                 // past the end
      R"({"x":{"dtype":"F32","shape":[1152921504606846976],"data_offsets":[0,4]}})",  // 2^60 elements
      R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      R"({"x":{"dtype":"Q8","shape":[1],"data_offsets":[0,1]}})", R"(not json)"};
  for (const char* h : headers) {
    write_raw(p, h, 12);
    EXPECT_THROW(load_safetensors(p), UsageError) << h;
  }
  std::ofstream(p, std::ios::binary) << std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8);
  EXPECT_THROW(load_safetensors(p), UsageError);
  std::remove(p.c_str());
}

TEST(Safetensors, EveryTruncationRefusedAndMemoryEqualsFile) {
  Tensor a({3, 2}), b({4});
  for (int i = 0; i < 6; ++i) a[i] = float(i) - 2.5f;
  for (int i = 0; i < 4; ++i) b[i] = float(i * i);
  const std::string p = tmpfile("trunc");
  save_safetensors(p, {{"a", &a, false}, {"b", &b, false}});
  std::ifstream f(p, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto from_file = load_safetensors(p), from_memory = parse_safetensors(bytes.data(), bytes.size(), "bytes");
  ASSERT_EQ(from_memory.size(), 2u);
  for (const char* name : {"a", "b"}) {
    EXPECT_EQ(from_memory[name].shape, from_file[name].shape);
    EXPECT_EQ(from_memory[name].data, from_file[name].data);
  }
  // Every proper prefix of the file (a copy cut short anywhere) is refused.
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_THROW(parse_safetensors(bytes.data(), n, "prefix"), UsageError) << n << " of " << bytes.size() << " bytes";
  std::remove(p.c_str());
}

TEST(Safetensors, RejectsMalformedEntries) {
  const char* headers[] = {
      R"({"x":{"dtype":"F32","shape":3,"data_offsets":[0,12]}})",                        // shape not a list
      R"({"x":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,3],"data_offsets":[0,12]}})",      // 9 dimensions
      R"({"x":{"dtype":"F32","shape":[-3],"data_offsets":[0,12]}})",                     // negative size
      R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[8,4]}})",                       // end before begin
      R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0]}})",                         // one offset
      R"({"x":{"dtype":7,"shape":[3],"data_offsets":[0,12]}})",                          // dtype not a string
      R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}})",                      // size disagrees
      R"([1,2,3])",                                                                      // not an object
      R"({"x":[]})",                                                                     // entry not an object
  };
  for (const char* h : headers) {
    std::string bytes(8, '\0');
    const uint64_t n = std::strlen(h);
    for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char(n >> (8 * i));
    bytes += h;
    bytes += std::string(12, '\0');
    EXPECT_THROW(parse_safetensors(bytes.data(), bytes.size(), "hostile"), UsageError) << h;
  }
}
