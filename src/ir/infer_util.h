#pragma once
// Helpers of the ops' shape inference (src/ir/ops_*.cpp).
#include <string>

#include "rlx/error.h"
#include "rlx/shape.h"

namespace rlx::infer {

// Signed a + b, a - b and a * b of sizes and attributes; rlx::Error naming `what` when the result
// does not fit in int64 (hostile attributes such as a dilation of 2^62 must not wrap).
inline int64_t add(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw Error(what + ": " + std::to_string(a) + " + " + std::to_string(b) + " overflows int64");
  return r;
}
inline int64_t sub(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) throw Error(what + ": " + std::to_string(a) + " - " + std::to_string(b) + " overflows int64");
  return r;
}
inline int64_t mul(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw Error(what + ": " + std::to_string(a) + " x " + std::to_string(b) + " overflows int64");
  return r;
}

// Two dims that must be equal: equal, or at least one symbolic (a mismatch can then only show at
// run time, where the kernels see concrete shapes).
inline bool dims_compatible(const Dim& a, const Dim& b) { return a == b || a.is_symbolic() || b.is_symbolic(); }

// Same rank and pairwise compatible dims (dtypes are not compared).
inline bool dims_compatible(const Shape& a, const Shape& b) {
  if (a.rank() != b.rank()) return false;
  for (int64_t i = 0; i < a.rank(); ++i)
    if (!dims_compatible(a.dims[static_cast<size_t>(i)], b.dims[static_cast<size_t>(i)])) return false;
  return true;
}

}  // namespace rlx::infer
