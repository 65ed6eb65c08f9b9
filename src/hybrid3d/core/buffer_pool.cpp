#include "hybrid3d/core/buffer_pool.hpp"

#include <malloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <new>

namespace h3d {

namespace {
constexpr std::align_val_t kAlign{64};
constexpr size_t kHugePage = size_t(2) << 20, kPage = 4096;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Where the next large buffer starts within its first page: a different
// cache line each time (64 colours). Buffers that all began on a 2 MiB
// boundary put w[i], g[i], m[i] and v[i] of an elementwise loop on the same
// cache sets and the same 4 KiB offsets, whose loads and stores then falsely
// depend on one another: Adam's update over cosmoflow-lbann's 9.4M weights
// took 320 ms instead of 50 on one thread (docs/performance.md).
size_t next_colour() {
  static std::atomic<unsigned> next{0};
  return size_t(next.fetch_add(1, std::memory_order_relaxed) * 37 % 64) * 64;
}

// What a buffer of `capacity` floats takes of memory once written: small
// ones their bytes; large ones at most their 4 KiB pages and one more (the
// colour), the whole 2 MiB pages on huge pages and the rest on small ones.
int64_t mapped_size(size_t capacity) {
  const size_t bytes = capacity * sizeof(float);
  return int64_t(bytes < kHugePage ? bytes : round_up(bytes, kPage) + kPage);
}
}  // namespace

void AlignedFloatDelete::operator()(float* p) const {
  if (mapped_bytes)  // the mapping starts at the page the buffer's colour is in
    munmap(reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) / kPage * kPage), mapped_bytes);
  else
    ::operator delete[](p, kAlign);
}

// Uninitialised: no pass over the memory.
AlignedFloats allocate_aligned_floats(size_t n) {
  const size_t bytes = n * sizeof(float);
  if (bytes < kHugePage)
    return AlignedFloats(static_cast<float*>(::operator new[](bytes, kAlign)), AlignedFloatDelete{0});
  // A mapping that starts on a 2 MiB boundary (map one huge page more and
  // cut), so that the kernel can back its whole 2 MiB pages with huge
  // pages; the part after the last whole one stays on 4 KiB pages, so that
  // a buffer a little over N huge pages does not take N + 1 of them.
  const size_t colour = next_colour(), used = colour + bytes, size = round_up(used, kPage);
  void* raw = mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = round_up(start, kHugePage);
  if (aligned > start) munmap(raw, aligned - start);
  const size_t tail = start + size + kHugePage - (aligned + size);
  if (tail) munmap(reinterpret_cast<void*>(aligned + size), tail);
  const size_t huge = used / kHugePage * kHugePage;
  madvise(reinterpret_cast<void*>(aligned), huge, MADV_HUGEPAGE);  // advice only: fine if refused
  return AlignedFloats(reinterpret_cast<float*>(aligned + colour), AlignedFloatDelete{size});
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
