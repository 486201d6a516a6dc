#pragma once
// Helpers of the ops' shape inference (src/ir/ops_*.cpp).
#include "rlx/shape.h"

namespace rlx::infer {

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
