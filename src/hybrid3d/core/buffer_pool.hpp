// BufferPool: recycles the large float buffers of activations and gradients.
//
// The network frees a tensor as soon as backward no longer needs it; the next
// step asks for the same sizes in the same order. Handing the freed buffers
// back (instead of returning them to the OS) avoids paying the page faults
// of fresh memory every step, while the pool never holds more than the peak
// of the live set. It also counts the bytes in tensors, which --profile
// reports as activation memory.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "hybrid3d/core/allocator.hpp"

namespace h3d {

// The host Allocator. 64-byte aligned buffers (a cache line, an AVX-512
// vector): oneDNN's kernels and the vectorised loops run faster on aligned
// rows. Buffers of 2 MiB and more are regions of mappings on transparent
// huge pages: a fresh one then costs one page fault per 2 MiB instead of per
// 4 KiB, and a region the pool lets go returns its memory to the OS at once.
class BufferPool : public Allocator {
 public:
  // What its buffers are. kMemory: host memory (the process's pool,
  // instance()). kAddressSpace: address space that is reserved and never
  // touched (MAP_NORESERVE), whose fill and copy do nothing: the memory
  // planner replays a step's allocations through the same policy to measure
  // their footprint without having the memory (plan/memory_model.hpp).
  enum class Backing { kMemory, kAddressSpace };
  explicit BufferPool(Backing backing);
  ~BufferPool() override;
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  static BufferPool& instance();
  const char* name() const override { return backing_ == Backing::kMemory ? "host" : "address space"; }
  bool host_accessible() const override { return true; }
  void fill(float* p, size_t n, float v) override;
  void copy(float* dst, const float* src, size_t n) override;
  // A buffer of at least n floats, contents unspecified. Reuses the smallest
  // free buffer that fits and wastes at most a quarter of it; a large one
  // (2 MiB and more) that would waste more is cut, and the rest stays free.
  // Given back, a large buffer merges with the free regions beside it. On a
  // miss it returns free buffers to the OS, smallest first, until live +
  // pooled + n stays within the highest live size seen (or live + n, if that
  // is more): the footprint never exceeds the peak of the live set.
  FloatBuffer take(size_t n) override;
  void give(FloatBuffer&& b) override;
  // Returns every free buffer to the OS.
  void trim();

  // Bytes as held: a buffer under 2 MiB its floats, a large one its whole
  // region (its pages, the first holding its colour).
  struct Stats {
    int64_t live_bytes = 0, pooled_bytes = 0, peak_bytes = 0;  // peak of live + pooled
    int64_t peak_live_bytes = 0;
  };
  Stats stats() const;
  // Both peaks start over from what is held now (after trim(): as in a
  // fresh process, so that the pool trims as it would there).
  void reset_peak();

 private:
  const Backing backing_;
  mutable std::mutex mu_;
  // Free buffers under 2 MiB (operator new's), by capacity.
  std::multimap<size_t, AlignedFloats> free_;
  // Free regions of whole pages (the large buffers' mappings, or parts of
  // them), by address (to merge neighbours) and by size (to find the best
  // fit). A region is part of one mapping (`mapping` numbers them), and no
  // two free parts of the same mapping lie side by side.
  struct Region {
    size_t bytes;
    uint64_t mapping;
  };
  std::map<uintptr_t, Region> regions_;
  std::multimap<size_t, uintptr_t> regions_by_size_;
  std::map<uintptr_t, uint64_t> live_mappings_;  // a live large buffer's region: its mapping
  uint64_t next_mapping_ = 0;
  void add_free_region(uintptr_t start, size_t bytes, uint64_t mapping);
  void erase_free_region(std::map<uintptr_t, Region>::iterator it);
  // Returns free buffers to the OS, smallest first, while live + pooled +
  // want exceeds cap.
  void release_free_until(int64_t cap, int64_t want);
  // Before mapping `want` fresh bytes: the footprint cap, the highest live
  // size seen (or live + want, if that is more).
  void make_room(int64_t want) { release_free_until(std::max(stats_.peak_live_bytes, stats_.live_bytes + want), want); }
  // A new free region of `need` bytes, fresh memory, after returning free
  // buffers to the OS as the footprint cap asks.
  std::map<uintptr_t, Region>::iterator map_region(size_t need);
  Stats stats_;
};

}  // namespace h3d
