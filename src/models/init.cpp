#include "models/init.h"

#include <cmath>
#include <numbers>

namespace rlx::models {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform double in [0, 1) from the top 53 bits.
double uniform01(uint64_t& state) { return static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53; }

std::vector<double> generate(int64_t n, InitKind kind, double scale, bool integral, uint64_t seed) {
  std::vector<double> v(static_cast<size_t>(n), 0.0);
  uint64_t state = seed;
  switch (kind) {
    case InitKind::Zeros: break;
    case InitKind::Ones:
      for (auto& x : v) x = 1.0;
      break;
    case InitKind::Normal:
    case InitKind::Uniform:
      if (integral) {
        for (auto& x : v) x = static_cast<double>(splitmix64(state) % 8);
      } else if (kind == InitKind::Uniform) {
        for (auto& x : v) x = (2.0 * uniform01(state) - 1.0) * scale;
      } else {
        for (size_t i = 0; i < v.size(); i += 2) {
          // Box-Muller: two normals from two uniforms; 1 - u keeps the log argument in (0, 1].
          const double u1 = 1.0 - uniform01(state);
          const double u2 = uniform01(state);
          const double r = std::sqrt(-2.0 * std::log(u1)) * scale;
          v[i] = r * std::cos(2.0 * std::numbers::pi * u2);
          if (i + 1 < v.size()) v[i + 1] = r * std::sin(2.0 * std::numbers::pi * u2);
        }
      }
      break;
  }
  return v;
}

}  // namespace

uint64_t name_seed(uint64_t seed, std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  uint64_t state = seed ^ h;
  return splitmix64(state);
}

Tensor init_tensor(DType dtype, const std::vector<int64_t>& dims, InitKind kind, double scale, uint64_t seed) {
  for (int64_t d : dims)
    if (d < 0) throw Error("init_tensor: negative dim in " + dims_str(dims));
  const int64_t n = product(dims);
  const bool integral = !is_float(dtype);
  std::vector<double> v = generate(n, kind, scale, integral, seed);
  if (dtype == DType::Bool)
    for (auto& x : v) x = static_cast<double>(static_cast<int64_t>(x) % 2);
  Tensor t = Tensor::f64(dims, v);
  return dtype == DType::F64 ? t : t.cast(dtype);
}

}  // namespace rlx::models
