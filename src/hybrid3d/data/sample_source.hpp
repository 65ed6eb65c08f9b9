// SampleSource: where samples come from. A rank asks only for its own block
// of a sample (a box of the global volume) and gets it channels first,
// transformed, as float; the source decides how little it must read.
#pragma once
#include <array>
#include <cstdint>
#include <vector>
#include <memory>
#include <string>

#include "hybrid3d/core/box.hpp"

namespace h3d {

enum class InputTransform { kNone, kLog1p };
InputTransform parse_transform(const std::string& s);

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t size() const = 0;
  virtual std::array<int64_t, 3> extent() const = 0;
  virtual int64_t channels() const = 0;
  static constexpr int kTargets = 4;
  // Regression sources (CosmoFlow): 0, and kTargets values per sample
  // (unitPar). Segmentation sources: the number of classes, and one label
  // per voxel of the box (as float: exact for any class count).
  virtual int64_t classes() const { return 0; }
  int64_t targets_of(const Box& box) const { return classes() > 0 ? box.volume() : kTargets; }
  // Whether the targets are real: a segmentation case read for prediction
  // may come without its labels (then its targets are 0).
  virtual bool has_labels() const { return true; }
  // out: [channels, box] (channels first), target: targets_of(box) values.
  virtual void load(int64_t index, const Box& box, float* out, float* target) = 0;
  virtual std::string describe() const = 0;
  // For sources whose load() is collective over a group of ranks (which then
  // all make the same calls): the maximum of v over the group, so that a
  // cache above makes the same decision on every rank of it. Collective
  // there; v itself elsewhere.
  virtual int64_t group_max(int64_t v) const { return v; }
  // Sources whose samples are int16 counts before the input transform (the
  // synthetic generator) can hand them over as such, so that a cache keeps
  // half the bytes: load_counts() fills [channels, box] with the counts,
  // and load() equals counts_transform() applied to them, bit for bit.
  virtual bool has_counts() const { return false; }
  virtual void load_counts(int64_t index, const Box& box, int16_t* out, float* target);
  virtual InputTransform counts_transform() const { return InputTransform::kNone; }
};

// Applies the input transform in place.
void apply_transform(InputTransform t, float* data, int64_t n);
// out[i] = transform(float(in[i])) for int16 counts, by table lookup:
// bitwise the same as apply_transform, at the cost of a copy.
void transform_counts(InputTransform t, const int16_t* in, float* out, int64_t n);
// The same for `channels` interleaved channels (channels last, as CosmoFlow
// files store them): out[c * n + i] = transform(float(in[i * channels + c])).
void transform_counts_to_channels_first(InputTransform t, const int16_t* in, int64_t channels, float* out, int64_t n);
// The counts themselves moved channels first: out[c * n + i] = in[i * channels + c].
void counts_to_channels_first(const int16_t* in, int64_t channels, int16_t* out, int64_t n);

}  // namespace h3d
