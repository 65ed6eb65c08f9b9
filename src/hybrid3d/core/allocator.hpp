// Allocator: where a Tensor's storage comes from. Each backend names the
// allocator its kernels read and write (Backend::allocator()); the layers
// give their activations that allocator, so that a device backend's
// tensors live in device memory without any layer knowing.
//
// The host allocator is the BufferPool (host memory, recycled between
// steps). Tensor's element access (operator[], fill(), copies) touches the
// storage from the CPU, so it is only for tensors whose allocator is
// host_accessible(); a device backend moves data through its own ops.
#pragma once
#include <algorithm>
#include <cstddef>
#include <memory>

namespace h3d {

// 64-byte aligned host floats; buffers of 2 MiB and more are their own
// mappings (see buffer_pool.cpp). A device allocator hands out buffers whose
// deleter releases device memory the same way (mapped_bytes is then its
// own bookkeeping).
struct AlignedFloatDelete {
  size_t mapped_bytes = 0;  // 0: from operator new
  void operator()(float* p) const;
};
using AlignedFloats = std::unique_ptr<float[], AlignedFloatDelete>;
AlignedFloats allocate_aligned_floats(size_t n);

struct FloatBuffer {
  AlignedFloats ptr;
  size_t capacity = 0;  // floats
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual const char* name() const = 0;
  // A buffer of at least n floats, contents unspecified.
  virtual FloatBuffer take(size_t n) = 0;
  virtual void give(FloatBuffer&& b) = 0;
  // Whether the CPU may read and write its buffers directly.
  virtual bool host_accessible() const = 0;
  // Element-wise fill and copy of its buffers (Tensor's fill and copies).
  // An allocator that only accounts for memory (the planner's) skips them.
  virtual void fill(float* p, size_t n, float v) { std::fill(p, p + n, v); }
  virtual void copy(float* dst, const float* src, size_t n) { std::copy(src, src + n, dst); }
};

// The process's host allocator (the BufferPool).
Allocator& host_allocator();

}  // namespace h3d
