// BufferPool: recycles the large float buffers of activations and gradients.
//
// The network frees a tensor as soon as backward no longer needs it; the next
// step asks for the same sizes in the same order. Handing the freed buffers
// back (instead of returning them to the OS) avoids paying the page faults
// of fresh memory every step, while the pool never holds more than the peak
// of the live set. It also counts the bytes in tensors, which --profile
// reports as activation memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace h3d {

struct FloatBuffer {
  std::unique_ptr<float[]> ptr;
  size_t capacity = 0;  // floats
};

class BufferPool {
 public:
  static BufferPool& instance();
  // A buffer of at least n floats, contents unspecified. Reuses the smallest
  // free buffer that fits and wastes at most a quarter of it; on a miss,
  // frees the smaller free buffers before allocating.
  FloatBuffer take(size_t n);
  void give(FloatBuffer&& b);
  // Returns every free buffer to the OS.
  void trim();

  struct Stats {
    int64_t live_bytes = 0, pooled_bytes = 0, peak_bytes = 0;  // peak of live + pooled
  };
  Stats stats() const;
  void reset_peak();

 private:
  BufferPool();
  mutable std::mutex mu_;
  std::multimap<size_t, std::unique_ptr<float[]>> free_;  // by capacity
  Stats stats_;
};

}  // namespace h3d
