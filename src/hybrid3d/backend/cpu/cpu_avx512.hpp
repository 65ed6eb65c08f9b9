// What the cpu backend's own AVX-512 kernels share: the target attribute
// for their functions (the rest of the build targets baseline x86-64, so
// only functions marked with it use AVX-512 instructions; OpenMP loops stay
// outside them) and the run-time check that picks them.
#pragma once
#include <immintrin.h>

#include <cstdint>

#define H3D_AVX512 __attribute__((target("avx512f,fma")))

namespace h3d {

// Whether this CPU runs the H3D_AVX512 functions (AVX-512F and FMA).
inline bool cpu_has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  return yes;
}

// The first n of 16 lanes (all for n >= 16, none for n <= 0).
H3D_AVX512 inline __mmask16 lanes_below(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u);
}

}  // namespace h3d
