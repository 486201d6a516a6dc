#pragma once
// Wall-clock timing shared by the CPU benchmarks.
#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

// Median wall time in ms of `reps` calls of `fn`, after one warm-up call.
inline double p50_ms(const std::function<void()>& fn, int reps) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
