#include "hybrid3d/core/buffer_pool.hpp"

#include <malloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <new>

namespace h3d {

namespace {
constexpr std::align_val_t kAlign{64};
constexpr size_t kHugePage = size_t(2) << 20;
}  // namespace

void AlignedFloatDelete::operator()(float* p) const {
  if (mapped_bytes)
    munmap(p, mapped_bytes);
  else
    ::operator delete[](p, kAlign);
}

namespace {
// What a buffer of `capacity` floats takes of memory once written.
int64_t mapped_size(size_t capacity) {
  const size_t bytes = capacity * sizeof(float);
  return int64_t(bytes < kHugePage ? bytes : (bytes + kHugePage - 1) / kHugePage * kHugePage);
}
}  // namespace

// Uninitialised: no pass over the memory.
AlignedFloats allocate_aligned_floats(size_t n) {
  const size_t bytes = n * sizeof(float);
  if (bytes < kHugePage)
    return AlignedFloats(static_cast<float*>(::operator new[](bytes, kAlign)), AlignedFloatDelete{0});
  // Map one huge page more than needed and cut the mapping to a 2 MiB
  // aligned range, so that the kernel can back all of it with huge pages.
  const size_t size = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* raw = mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(raw, aligned - start);
  const size_t tail = start + size + kHugePage - (aligned + size);
  if (tail) munmap(reinterpret_cast<void*>(aligned + size), tail);
  madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);  // advice only: fine if refused
  return AlignedFloats(reinterpret_cast<float*>(aligned), AlignedFloatDelete{size});
}

namespace {
// Address space for a buffer that is accounted for but never used: no page
// of it is committed unless written.
AlignedFloats reserve_address_space(size_t n) {
  const size_t page = 4096, size = std::max(page, (n * sizeof(float) + page - 1) / page * page);
  void* raw = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  return AlignedFloats(static_cast<float*>(raw), AlignedFloatDelete{size});
}
}  // namespace

Allocator& host_allocator() { return BufferPool::instance(); }

BufferPool& BufferPool::instance() {
  static BufferPool pool(Backing::kMemory);
  return pool;
}

BufferPool::BufferPool(Backing backing) : backing_(backing) {
  // The other large allocations (std::vector) mmap'd too: freeing one
  // returns its pages to the OS (glibc would otherwise raise the threshold
  // and keep them in the heap).
  if (backing == Backing::kMemory) mallopt(M_MMAP_THRESHOLD, 1 << 20);
}

void BufferPool::fill(float* p, size_t n, float v) {
  if (backing_ == Backing::kMemory) Allocator::fill(p, n, v);
}

void BufferPool::copy(float* dst, const float* src, size_t n) {
  if (backing_ == Backing::kMemory) Allocator::copy(dst, src, n);
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
    // A miss. Keep the footprint within the live peak: give back free
    // buffers (the smallest are the cheapest to fault in again) first.
    const int64_t want = int64_t(n * sizeof(float));
    const int64_t cap = std::max(stats_.peak_live_bytes, stats_.live_bytes + want);
    for (auto f = free_.begin(); f != free_.end() && stats_.live_bytes + stats_.pooled_bytes + want > cap;) {
      stats_.pooled_bytes -= int64_t(f->first * sizeof(float));
      stats_.mapped_bytes -= mapped_size(f->first);
      f = free_.erase(f);
    }
    b.ptr = backing_ == Backing::kMemory ? allocate_aligned_floats(n) : reserve_address_space(n);
    b.capacity = n;
    stats_.mapped_bytes += mapped_size(n);
  }
  stats_.live_bytes += int64_t(b.capacity * sizeof(float));
  stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, stats_.live_bytes);
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.live_bytes + stats_.pooled_bytes);
  stats_.peak_mapped_bytes = std::max(stats_.peak_mapped_bytes, stats_.mapped_bytes);
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
  for (const auto& f : free_) stats_.mapped_bytes -= mapped_size(f.first);
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
  stats_.peak_live_bytes = stats_.live_bytes;
  stats_.peak_mapped_bytes = stats_.mapped_bytes;
}

}  // namespace h3d
