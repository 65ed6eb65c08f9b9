#include "hybrid3d/core/buffer_pool.hpp"

#include <malloc.h>

#include <algorithm>

namespace h3d {

BufferPool& BufferPool::instance() {
  static BufferPool pool;
  return pool;
}

BufferPool::BufferPool() {
  // Large buffers always mmap'd: freeing one returns its pages to the OS
  // (glibc would otherwise raise the threshold and keep them in the heap).
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
}

FloatBuffer BufferPool::take(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  FloatBuffer b;
  auto it = free_.lower_bound(n);
  if (it != free_.end() && it->first - n <= it->first / 4) {
    b.capacity = it->first;
    b.ptr = std::move(it->second);
    free_.erase(it);
    stats_.pooled_bytes -= int64_t(b.capacity * sizeof(float));
  } else {
    // A miss: the free buffers smaller than n cannot serve this request;
    // return them to the OS first so that they do not add to the peak.
    for (auto f = free_.begin(); f != free_.end() && f->first < n;) {
      stats_.pooled_bytes -= int64_t(f->first * sizeof(float));
      f = free_.erase(f);
    }
    b.ptr.reset(new float[n]);  // default-initialised: no pass over the memory
    b.capacity = n;
  }
  stats_.live_bytes += int64_t(b.capacity * sizeof(float));
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.live_bytes + stats_.pooled_bytes);
  return b;
}

void BufferPool::give(FloatBuffer&& b) {
  if (!b.ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  int64_t bytes = int64_t(b.capacity * sizeof(float));
  stats_.live_bytes -= bytes;
  stats_.pooled_bytes += bytes;
  free_.emplace(b.capacity, std::move(b.ptr));
  b.capacity = 0;
}

void BufferPool::trim() {
  std::lock_guard<std::mutex> lock(mu_);
  free_.clear();
  stats_.pooled_bytes = 0;
}

BufferPool::Stats BufferPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void BufferPool::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes = stats_.live_bytes + stats_.pooled_bytes;
}

}  // namespace h3d
