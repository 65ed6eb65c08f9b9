// safetensors files: an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
// then the raw little-endian data. Names and shapes are those of the
// equivalent PyTorch module's state_dict, so files load with
// safetensors.torch / torch and come back.
//
// The reader validates before it allocates: header length within the file,
// offsets inside the data section, no overlaps, size == dtype size * shape,
// at most 8 dimensions; so no allocation is larger than the file.
// The writer writes "<file>.tmp.<pid>" and renames, so a crash never leaves
// a half-written file under the real name.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "hybrid3d/core/tensor.hpp"

namespace h3d {

struct NamedTensor {
  std::string name;
  const Tensor* tensor;
  bool as_int64 = false;  // stored as I64 (integer state like num_batches_tracked)
};

void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct LoadedTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;  // F32, F64, I64 and I32 are converted
};
// UsageError naming the file and what is wrong with it.
std::map<std::string, LoadedTensor> load_safetensors(const std::string& path);
// The same checks and result for a whole file's bytes in memory (`what`
// names it in errors); the fuzz target's entry (fuzz/safetensors_fuzz.cpp).
std::map<std::string, LoadedTensor> parse_safetensors(const char* bytes, size_t size, const std::string& what);

}  // namespace h3d
