// BoxKernels: moving boxes of cells between [nc, box] buffers, the memory
// traffic of the halo exchange. Every Backend is a BoxKernels (its tensors
// may live where the CPU cannot reach them), and the halo exchange, which
// knows no backend, is handed one; host_box_kernels() are the plain loops
// on host memory, for the data readers and the reference backend.
//
// A buffer "over box B" holds nc channels of B's cells in row-major
// [nc, B.d, B.h, B.w] order; boxes are in global coordinates.
#pragma once
#include <cstdint>

#include "hybrid3d/core/box.hpp"

namespace h3d {

enum class CopyMode { kAssign, kAdd };

class BoxKernels {
 public:
  virtual ~BoxKernels() = default;
  // dst[region] (=|+=) src[region] for nc channels; src is a buffer over
  // src_origin, dst over dst_origin, both contain region. Packing a box
  // into a message is a copy to a buffer over the region itself; unpacking,
  // the copy back.
  virtual void copy_box(const float* src, const Box& src_origin, float* dst, const Box& dst_origin, const Box& region,
                        int64_t nc, CopyMode mode) = 0;
  // In-place change of layout inside one buffer of nc channels: the cells
  // of `region` move from the layout over `from` to the layout over `to`.
  // Either `to` contains `from` (growing into a halo-padded layout; the
  // buffer must hold the larger one) or `from` contains `to` (shrinking).
  // Cells of the new layout outside `region` are left as they are.
  virtual void relayout_in_place(float* t, int64_t nc, const Box& from, const Box& to, const Box& region) = 0;
  // Sets every cell of the buffer over `origin` outside `inner` to v.
  virtual void fill_outside(float* t, int64_t nc, const Box& origin, const Box& inner, float v) = 0;
};

// Plain loops on host memory.
BoxKernels& host_box_kernels();

}  // namespace h3d
