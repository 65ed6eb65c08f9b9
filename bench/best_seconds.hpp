// The kernel benchmarks' timer: the best of `reps` runs of f after one
// warm-up run (primitive creation, first touch of the buffers).
#pragma once
#include <algorithm>
#include <chrono>

template <typename F>
double best_seconds(int reps, F f) {
  f();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}
