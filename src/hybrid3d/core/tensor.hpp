// Tensor: a dense, row-major fp32 host buffer with up to 5 dimensions.
// Spatial activations are [N, C, D, H, W] (NCDHW, the logical layout
// everywhere outside a backend); dense ones are [N, F].
//
// Storage comes from the tensor's Allocator (the host BufferPool unless
// set_allocator() named a backend's) and goes back to it on release() or
// destruction, so that freeing activations early costs nothing on the next
// step. Element access from the CPU (operator[], fill(), copies) is for
// host-accessible allocators only. A tensor may own more capacity than it uses (a buffer grown in place
// for a halo-padded copy, see HaloExchange).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "hybrid3d/core/buffer_pool.hpp"
#include "hybrid3d/core/error.hpp"

namespace h3d {

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::vector<int64_t> shape, float fill = 0.0f) { resize(std::move(shape), fill); }
  // An empty tensor whose storage will come from `a`.
  explicit Tensor(Allocator& a) : alloc_(&a) {}
  Tensor(const Tensor& o) { *this = o; }
  Tensor(Tensor&& o) noexcept { *this = std::move(o); }
  Tensor& operator=(const Tensor& o) {
    if (this == &o) return *this;
    if (buf_.capacity == 0) alloc_ = o.alloc_;
    reshape_uninit(o.shape_);
    if (numel_) alloc_->copy(data(), o.data(), size_t(numel_));
    return *this;
  }
  Tensor& operator=(Tensor&& o) noexcept {
    if (this == &o) return *this;
    release();
    alloc_ = o.alloc_;
    buf_ = std::move(o.buf_);
    shape_ = std::move(o.shape_);
    numel_ = o.numel_;
    o.buf_.capacity = 0;
    o.shape_.clear();
    o.numel_ = 0;
    return *this;
  }
  ~Tensor() { release(); }

  // New shape, every element set to `fill`.
  void resize(std::vector<int64_t> shape, float fill = 0.0f) {
    reshape_uninit(shape);
    this->fill(fill);
  }
  // New shape; the contents are unspecified unless the element count is
  // unchanged (then they are kept). For outputs that are fully overwritten.
  void reshape_uninit(const std::vector<int64_t>& shape) {
    int64_t n = count(shape);
    if (size_t(n) > buf_.capacity) {
      release();
      buf_ = alloc_->take(size_t(n));
    }
    shape_ = shape;
    numel_ = n;
  }
  void reshape_like(const std::vector<int64_t>& shape) { reshape_uninit(shape); }
  // Makes the capacity at least n floats before the tensor is written
  // (the contents are dropped if a new buffer is needed).
  void reserve(int64_t n) {
    if (size_t(n) <= buf_.capacity) return;
    auto shape = shape_;
    release();
    buf_ = alloc_->take(size_t(n));
    shape_ = shape;
    numel_ = count(shape);
  }
  // Gives the storage back to the pool; the tensor becomes empty.
  void release() {
    if (buf_.ptr) alloc_->give(std::move(buf_));
    buf_.capacity = 0;
    shape_.clear();
    numel_ = 0;
  }
  // Where the storage comes from; changing it needs an empty tensor.
  Allocator& allocator() const { return *alloc_; }
  void set_allocator(Allocator& a) {
    if (alloc_ == &a) return;
    H3D_CHECK(buf_.capacity == 0, "a tensor's allocator changed while it holds storage");
    alloc_ = &a;
  }
  // Capacity in floats (at least numel()).
  size_t capacity() const { return buf_.capacity; }
  void fill(float v) {
    if (numel_) alloc_->fill(data(), size_t(numel_), v);
  }

  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i)); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return numel_; }
  bool empty() const { return numel_ == 0; }
  float* data() { return buf_.ptr.get(); }
  const float* data() const { return buf_.ptr.get(); }
  float& operator[](int64_t i) { return buf_.ptr[static_cast<size_t>(i)]; }
  float operator[](int64_t i) const { return buf_.ptr[static_cast<size_t>(i)]; }
  std::vector<float> to_vector() const { return std::vector<float>(data(), data() + numel_); }

  static int64_t count(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (auto d : s) n *= d;
    return s.empty() ? 0 : n;
  }
  std::string shape_str() const {
    std::string s = "[";
    for (size_t i = 0; i < shape_.size(); ++i) s += (i ? "," : "") + std::to_string(shape_[i]);
    return s + "]";
  }

 private:
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  FloatBuffer buf_;
  Allocator* alloc_ = &host_allocator();
};

}  // namespace h3d
