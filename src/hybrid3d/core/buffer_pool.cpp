#include "hybrid3d/core/buffer_pool.hpp"

#include <algorithm>

namespace h3d {

BufferPool& BufferPool::instance() {
  static BufferPool pool;
  return pool;
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
