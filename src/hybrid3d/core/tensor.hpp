// Tensor: a dense, row-major fp32 host buffer with up to 5 dimensions.
// Spatial activations are [N, C, D, H, W] (NCDHW, the logical layout
// everywhere outside a backend); dense ones are [N, F].
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "hybrid3d/core/error.hpp"

namespace h3d {

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::vector<int64_t> shape, float fill = 0.0f) { resize(std::move(shape), fill); }

  void resize(std::vector<int64_t> shape, float fill = 0.0f) {
    shape_ = std::move(shape);
    data_.assign(static_cast<size_t>(count(shape_)), fill);
  }
  // Re-shape keeping the buffer (no fill) when the element count is unchanged.
  void reshape_like(const std::vector<int64_t>& shape) {
    if (count(shape) == numel()) {
      shape_ = shape;
    } else {
      resize(shape);
    }
  }
  void fill(float v) { std::fill(data_.begin(), data_.end(), v); }

  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i)); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return static_cast<int64_t>(data_.size()); }
  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  float& operator[](int64_t i) { return data_[static_cast<size_t>(i)]; }
  float operator[](int64_t i) const { return data_[static_cast<size_t>(i)]; }
  std::vector<float>& vec() { return data_; }
  const std::vector<float>& vec() const { return data_; }

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
  std::vector<float> data_;
};

}  // namespace h3d
