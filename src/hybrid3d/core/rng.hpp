// Counter-based random numbers: every value is a pure function of
// (seed, stream, index), so a voxel's noise or a dropout mask bit is the same
// whichever rank computes it and in whatever order. This is what makes
// synthetic data and dropout independent of the parallel layout.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

namespace h3d {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// FNV-1a over bytes: a hash that is the same on every platform and run
// (unlike std::hash), for naming random streams and fingerprinting weights.
constexpr uint64_t kFnvOffset = 1469598103934665603ull;
inline uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = kFnvOffset) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
inline uint64_t fnv1a(const std::string& s) { return fnv1a(s.data(), s.size()); }

inline uint64_t hash_key(uint64_t seed, uint64_t stream, uint64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ index);
}

// Uniform in (0, 1), never exactly 0 or 1.
inline double uniform01(uint64_t seed, uint64_t stream, uint64_t index) {
  return (static_cast<double>(hash_key(seed, stream, index) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Standard normal by Box-Muller from two independent uniforms.
inline double normal01(uint64_t seed, uint64_t stream, uint64_t index) {
  double u1 = uniform01(seed, stream, 2 * index);
  double u2 = uniform01(seed, stream, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// Poisson sample with mean lambda from a counter-based stream: inversion for
// small means, a rounded normal approximation for large ones.
inline int64_t poisson(double lambda, uint64_t seed, uint64_t stream, uint64_t index) {
  if (lambda <= 0) return 0;
  if (lambda > 64.0) {
    double z = normal01(seed, stream ^ 0x5a5a5a5aull, index);
    double v = std::floor(lambda + std::sqrt(lambda) * z + 0.5);
    return v < 0 ? 0 : static_cast<int64_t>(v);
  }
  double u = uniform01(seed, stream, index);
  double p = std::exp(-lambda), cdf = p;
  int64_t k = 0;
  while (u > cdf && k < 1000) {
    ++k;
    p *= lambda / static_cast<double>(k);
    cdf += p;
  }
  return k;
}

}  // namespace h3d
