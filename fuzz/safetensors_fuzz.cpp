// Any byte string as a safetensors file: the reader either returns tensors
// whose sizes match their shapes or throws UsageError. Anything else (a
// crash, another exception, an allocation beyond the file's size, a
// sanitizer report) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/train/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto tensors = h3d::parse_safetensors(reinterpret_cast<const char*>(data), size, "fuzz input");
    for (const auto& kv : tensors) {
      uint64_t count = 1;
      for (int64_t d : kv.second.shape) count *= uint64_t(d);
      if (count != kv.second.data.size()) std::abort();  // a tensor whose data disagrees with its shape
    }
  } catch (const h3d::UsageError&) {
    // the expected answer to a bad file
  }
  return 0;
}
