#pragma once
// Helpers shared by the elementwise and shape op tests: running one op on the CPU, numpy
// broadcasting of reference indices, and integer wrapping to a dtype's width.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "support/test_util.h"

namespace rlx::elemtest {

// The compute dtypes (the storage-only ones are tested in test_cast_narrow.cpp).
inline const DType kAllTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I8,  DType::I16, DType::I32,
                                  DType::I64, DType::U8,  DType::U16,  DType::U32, DType::U64, DType::Bool};
inline const DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64};
inline const DType kIntTypes[] = {DType::I8, DType::I16, DType::I32, DType::I64,
                                  DType::U8, DType::U16, DType::U32, DType::U64};

inline bool is_unsigned(DType t) { return t == DType::U8 || t == DType::U16 || t == DType::U32 || t == DType::U64; }

using testing::run_op;

// Output shape of a graph node (inference only).
inline Shape infer1(const Op& op, const std::vector<Shape>& ins) { return infer_op(op, ins).at(0); }

// numpy broadcast of several dim lists (the test's own implementation).
inline std::vector<int64_t> bcast(const std::vector<std::vector<int64_t>>& shapes) {
  size_t r = 0;
  for (const auto& s : shapes) r = std::max(r, s.size());
  std::vector<int64_t> out(r, 1);
  for (const auto& s : shapes)
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[r - s.size() + i];
      if (o == 1) o = s[i];
    }
  return out;
}

// Flat index into an operand of dims `in` for output multi-index `oi` (numpy broadcasting).
inline int64_t bcast_index(const std::vector<int64_t>& oi, const std::vector<int64_t>& in) {
  const size_t off = oi.size() - in.size();
  int64_t idx = 0;
  for (size_t d = 0; d < in.size(); ++d) idx = idx * in[d] + (in[d] == 1 ? 0 : oi[off + d]);
  return idx;
}

// Wraps an integer to the value range of integer/bool dtype `t` (two's complement).
inline double wrap_to(DType t, int64_t v) {
  switch (t) {
    case DType::I8: return static_cast<int8_t>(v);
    case DType::I16: return static_cast<int16_t>(v);
    case DType::I32: return static_cast<int32_t>(v);
    case DType::I64: return static_cast<double>(v);
    case DType::U8: return static_cast<uint8_t>(v);
    case DType::U16: return static_cast<uint16_t>(v);
    case DType::U32: return static_cast<uint32_t>(v);
    case DType::U64: return static_cast<double>(static_cast<uint64_t>(v));
    case DType::Bool: return v != 0;
    default: return static_cast<double>(v);
  }
}

// Uniform doubles; integers are rounded down for integer dtypes, 0/1 for bool.
inline std::vector<double> uniform(DType t, int64_t n, double lo, double hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) {
    x = dist(rng);
    if (t == DType::Bool) x = x > (lo + hi) / 2 ? 1 : 0;
    else if (is_int(t)) x = std::floor(x);
  }
  return v;
}

}  // namespace rlx::elemtest
