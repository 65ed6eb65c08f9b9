#include "hybrid3d/core/move_pages.hpp"

#include <sys/mman.h>

#include <new>

namespace h3d {

namespace {
constexpr size_t kPage = 4096;
}

bool kernel_move(uintptr_t src, uintptr_t dst, size_t bytes) {
  return mremap(reinterpret_cast<void*>(src), bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED,
                reinterpret_cast<void*>(dst)) != MAP_FAILED;
}

void move_pages(uintptr_t src, uintptr_t dst, size_t bytes, bool reserve_only, PageMover mover) {
  if (bytes == 0 || mover(src, dst, bytes)) return;
  // The refused move may have unmapped dst: map it afresh.
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | (reserve_only ? MAP_NORESERVE : 0);
  if (mmap(reinterpret_cast<void*>(dst), bytes, PROT_READ | PROT_WRITE, flags, -1, 0) == MAP_FAILED)
    throw std::bad_alloc();
  if (bytes <= kPage) {
    munmap(reinterpret_cast<void*>(src), bytes);
    return;
  }
  const size_t half = bytes / 2 / kPage * kPage;
  move_pages(src, dst, half, reserve_only, mover);
  move_pages(src + half, dst + half, bytes - half, reserve_only, mover);
}

}  // namespace h3d
