#include "hybrid3d/data/sample_source.hpp"

#include <cmath>

#include "hybrid3d/core/error.hpp"

namespace h3d {

InputTransform parse_transform(const std::string& s) {
  if (s == "log1p") return InputTransform::kLog1p;
  if (s == "none") return InputTransform::kNone;
  H3D_THROW(UsageError, "--transform '" << s << "' is unknown; use log1p or none");
}

void apply_transform(InputTransform t, float* data, int64_t n) {
  if (t == InputTransform::kNone) return;
  for (int64_t i = 0; i < n; ++i) data[i] = std::log1p(std::max(data[i], 0.0f));
}

namespace {

// One value for each of the 65536 int16 counts, per transform (built once).
const float* count_table(InputTransform t) {
  static const std::vector<float> tables[2] = {
      [] {
        std::vector<float> v(65536);
        for (int i = 0; i < 65536; ++i) v[size_t(i)] = float(int16_t(uint16_t(i)));
        return v;
      }(),
      [] {
        std::vector<float> v(65536);
        for (int i = 0; i < 65536; ++i) v[size_t(i)] = float(int16_t(uint16_t(i)));
        apply_transform(InputTransform::kLog1p, v.data(), int64_t(v.size()));
        return v;
      }()};
  return tables[t == InputTransform::kLog1p ? 1 : 0].data();
}

}  // namespace

void SampleSource::load_counts(int64_t, const Box&, int16_t*, float*) {
  H3D_THROW(Error, describe() << " has no integer counts to load (has_counts() is false)");
}

void transform_counts(InputTransform t, const int16_t* in, float* out, int64_t n) {
  const float* table = count_table(t);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = table[uint16_t(in[i])];
}

namespace {
template <class Out, class Value>
void to_channels_first(const int16_t* in, int64_t channels, Out* out, int64_t n, Value value) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < channels; ++c) out[c * n + i] = value(in[i * channels + c]);
}
}  // namespace

void transform_counts_to_channels_first(InputTransform t, const int16_t* in, int64_t channels, float* out, int64_t n) {
  const float* table = count_table(t);
  to_channels_first(in, channels, out, n, [table](int16_t v) { return table[uint16_t(v)]; });
}

void counts_to_channels_first(const int16_t* in, int64_t channels, int16_t* out, int64_t n) {
  to_channels_first(in, channels, out, n, [](int16_t v) { return v; });
}

}  // namespace h3d
