// move_pages: pages of one place in this process's memory moved to another
// without being touched: the kernel re-points them (mremap), so that none is
// faulted in or zeroed and their contents come along. The BufferPool makes a
// large buffer out of smaller free ones this way.
#pragma once
#include <cstddef>
#include <cstdint>

namespace h3d {

// One move as the kernel makes it (mremap): true if done. If not, dst may
// have been unmapped (the kernel clears the target before it checks the
// source).
bool kernel_move(uintptr_t src, uintptr_t dst, size_t bytes);
using PageMover = bool (*)(uintptr_t src, uintptr_t dst, size_t bytes);

// Moves the pages of [src, src + bytes) to [dst, dst + bytes), both
// page-aligned, dst mapped. Afterwards src is unmapped. Where the mover
// refuses (kernels before 6.17 move within one kernel mapping only, and a
// range may span several), each half is tried; a page that cannot be moved
// is unmapped and leaves fresh memory at dst, reserved only (no swap space
// counted) if `reserve_only`. Throws std::bad_alloc if dst cannot be mapped
// again. `mover`: a test stands in an older kernel.
void move_pages(uintptr_t src, uintptr_t dst, size_t bytes, bool reserve_only, PageMover mover = kernel_move);

}  // namespace h3d
