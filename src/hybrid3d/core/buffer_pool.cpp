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

// A large buffer's region: its first page holds the colour, the rest at
// least its floats. Independent of the colour, so that a dry pool
// (kAddressSpace) makes the same decisions and counts the same bytes as the
// real one whatever colours each draws.
size_t region_bytes(size_t n) { return round_up(n * sizeof(float), kPage) + kPage; }
size_t region_capacity(size_t bytes) { return (bytes - kPage) / sizeof(float); }
bool is_large(size_t n) { return n * sizeof(float) >= kHugePage; }
}  // namespace

void AlignedFloatDelete::operator()(float* p) const {
  if (mapped_bytes)  // the mapping starts at the page the buffer's colour is in
    munmap(reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) / kPage * kPage), mapped_bytes);
  else
    ::operator delete[](p, kAlign);
}

namespace {
// `bytes` (whole pages) of fresh memory. A mapping that starts on a 2 MiB
// boundary (map one huge page more and cut), so that the kernel can back its
// whole 2 MiB pages with huge pages; the part after the last whole one stays
// on 4 KiB pages, so that a buffer a little over N huge pages does not take
// N + 1 of them.
uintptr_t map_memory(size_t bytes) {
  void* raw = mmap(nullptr, bytes + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = round_up(start, kHugePage);
  if (aligned > start) munmap(raw, aligned - start);
  const size_t tail = start + bytes + kHugePage - (aligned + bytes);
  if (tail) munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  madvise(reinterpret_cast<void*>(aligned), bytes / kHugePage * kHugePage, MADV_HUGEPAGE);  // advice: fine if refused
  return aligned;
}

// Address space for a buffer that is accounted for but never used: no page
// of it is committed unless written.
uintptr_t reserve_address_space(size_t bytes) {
  void* raw = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  return reinterpret_cast<uintptr_t>(raw);
}

// The buffer of `bytes` at `start`, starting at the next colour.
AlignedFloats buffer_at(uintptr_t start, size_t bytes) {
  return AlignedFloats(reinterpret_cast<float*>(start + next_colour()), AlignedFloatDelete{bytes});
}
}  // namespace

// Uninitialised: no pass over the memory.
AlignedFloats allocate_aligned_floats(size_t n) {
  if (!is_large(n))
    return AlignedFloats(static_cast<float*>(::operator new[](n * sizeof(float), kAlign)), AlignedFloatDelete{0});
  const size_t bytes = region_bytes(n);
  return buffer_at(map_memory(bytes), bytes);
}

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

BufferPool::~BufferPool() { trim(); }

void BufferPool::fill(float* p, size_t n, float v) {
  if (backing_ == Backing::kMemory) Allocator::fill(p, n, v);
}

void BufferPool::copy(float* dst, const float* src, size_t n) {
  if (backing_ == Backing::kMemory) Allocator::copy(dst, src, n);
}

void BufferPool::add_free_region(uintptr_t start, size_t bytes, uint64_t mapping) {
  // Merge with the free regions either side that are parts of the same
  // mapping. Not with a neighbour that only happens to lie beside it: where
  // the kernel puts mappings differs between the real pool and the dry one,
  // whose decisions must be the same.
  auto right = regions_.find(start + bytes);
  if (right != regions_.end() && right->second.mapping == mapping) {
    bytes += right->second.bytes;
    erase_free_region(right);
  }
  auto left = regions_.lower_bound(start);
  if (left != regions_.begin()) {
    --left;
    if (left->first + left->second.bytes == start && left->second.mapping == mapping) {
      start = left->first;
      bytes += left->second.bytes;
      erase_free_region(left);
    }
  }
  regions_.emplace(start, Region{bytes, mapping});
  regions_by_size_.emplace(bytes, start);
  stats_.pooled_bytes += int64_t(bytes);
}

void BufferPool::erase_free_region(std::map<uintptr_t, Region>::iterator it) {
  auto range = regions_by_size_.equal_range(it->second.bytes);
  for (auto s = range.first; s != range.second; ++s)
    if (s->second == it->first) {
      regions_by_size_.erase(s);
      break;
    }
  stats_.pooled_bytes -= int64_t(it->second.bytes);
  regions_.erase(it);
}

void BufferPool::release_free_until(int64_t cap, int64_t want) {
  // Smallest first (the cheapest to fault in again): the operator-new
  // buffers are all smaller than any region.
  for (auto f = free_.begin(); f != free_.end() && stats_.live_bytes + stats_.pooled_bytes + want > cap;) {
    stats_.pooled_bytes -= int64_t(f->first * sizeof(float));
    f = free_.erase(f);
  }
  while (!regions_by_size_.empty() && stats_.live_bytes + stats_.pooled_bytes + want > cap) {
    const auto [bytes, start] = *regions_by_size_.begin();
    erase_free_region(regions_.find(start));
    munmap(reinterpret_cast<void*>(start), bytes);
  }
}

std::map<uintptr_t, BufferPool::Region>::iterator BufferPool::map_region(size_t need) {
  make_room(int64_t(need));
  const uintptr_t start = backing_ == Backing::kMemory ? map_memory(need) : reserve_address_space(need);
  regions_by_size_.emplace(need, start);
  stats_.pooled_bytes += int64_t(need);  // the caller takes it from the pool
  return regions_.emplace(start, Region{need, next_mapping_++}).first;
}

FloatBuffer BufferPool::take(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  FloatBuffer b;
  if (is_large(n)) {
    // Best fit among the free regions: whole if it wastes at most a
    // quarter, else cut from its front (the rest stays free); if none is
    // large enough, fresh memory. That costs a page fault and a zeroed page
    // per 4 KiB (or 2 MiB): cosmoflow 128^3 mapped some 600 MB afresh every
    // step without the cutting, about a tenth of the step.
    const size_t need = region_bytes(n);
    auto fit = regions_by_size_.lower_bound(need);
    auto it = fit == regions_by_size_.end() ? map_region(need) : regions_.find(fit->second);
    const uintptr_t start = it->first;
    const auto [bytes, mapping] = it->second;
    erase_free_region(it);
    const size_t taken = bytes - need <= bytes / 4 ? bytes : need;
    if (taken < bytes) add_free_region(start + taken, bytes - taken, mapping);
    live_mappings_.emplace(start, mapping);
    b.capacity = region_capacity(taken);
    b.ptr = buffer_at(start, taken);
    stats_.live_bytes += int64_t(taken);
  } else {
    auto it = free_.lower_bound(n);
    if (it != free_.end() && it->first - n <= it->first / 4) {
      b.capacity = it->first;
      b.ptr = std::move(it->second);
      free_.erase(it);
      stats_.pooled_bytes -= int64_t(b.capacity * sizeof(float));
    } else {
      // A miss. Keep the footprint within the live peak: give back free
      // buffers first.
      const int64_t want = int64_t(n * sizeof(float));
      make_room(want);
      if (backing_ == Backing::kMemory) {
        b.ptr = allocate_aligned_floats(n);
      } else {
        const size_t pages = round_up(size_t(want), kPage);
        b.ptr = AlignedFloats(reinterpret_cast<float*>(reserve_address_space(pages)), AlignedFloatDelete{pages});
      }
      b.capacity = n;
    }
    stats_.live_bytes += int64_t(b.capacity * sizeof(float));
  }
  stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, stats_.live_bytes);
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.live_bytes + stats_.pooled_bytes);
  return b;
}

void BufferPool::give(FloatBuffer&& b) {
  if (!b.ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  const size_t mapped = b.ptr.get_deleter().mapped_bytes;
  if (is_large(b.capacity) && mapped) {
    const uintptr_t start = reinterpret_cast<uintptr_t>(b.ptr.release()) / kPage * kPage;
    auto live = live_mappings_.find(start);
    uint64_t mapping = next_mapping_++;  // a buffer this pool did not hand out: a mapping of its own
    if (live != live_mappings_.end()) {
      mapping = live->second;
      live_mappings_.erase(live);
    }
    stats_.live_bytes -= int64_t(mapped);
    add_free_region(start, mapped, mapping);
  } else {
    stats_.live_bytes -= int64_t(b.capacity * sizeof(float));
    stats_.pooled_bytes += int64_t(b.capacity * sizeof(float));
    free_.emplace(b.capacity, std::move(b.ptr));
  }
  b.capacity = 0;
}

void BufferPool::trim() {
  std::lock_guard<std::mutex> lock(mu_);
  release_free_until(0, 0);
}

BufferPool::Stats BufferPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void BufferPool::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes = stats_.live_bytes + stats_.pooled_bytes;
  stats_.peak_live_bytes = stats_.live_bytes;
}

}  // namespace h3d
