#pragma once
// Shared machinery of the elementwise CPU kernels (kernels_elementwise.cpp, kernels_activation.cpp,
// kernels_cast.cpp, kernels_region.cpp, kernels_shape.cpp):
//  - BroadcastPlan: the output index space with operand strides, size-1 dims dropped and
//    adjacent dims coalesced, walked row by row (the innermost dim is one "row"), so every
//    kernel runs a tight inner loop whose operand strides are 0 or a constant.
//  - Span-level entry points (one dtype/kind dispatch per call) used by ElementwiseRegion,
//    which evaluates its step chain block by block into temporary buffers.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/parallel.h"
#include "backends/cpu/util.h"
#include "rlx/ops.h"

namespace rlx::cpu {

inline constexpr int64_t kElementwiseGrain = 16384;

template <DType D> using storage_t = typename dtype_storage<D>::type;

constexpr bool is_float_dtype(DType d) {
  return d == DType::F32 || d == DType::F16 || d == DType::BF16 || d == DType::F64;
}
// Among the compute dtypes (visit_dtype's): every non-float but bool is an integer.
constexpr bool is_int_dtype(DType d) { return !is_float_dtype(d) && d != DType::Bool; }

// Two's complement wrapping integer arithmetic (no signed-overflow UB).
template <class T>
inline T wrap_add(T a, T b) { return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
template <class T>
inline T wrap_sub(T a, T b) { return static_cast<T>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b)); }
template <class T>
inline T wrap_mul(T a, T b) { return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }

// ---- broadcast plan --------------------------------------------------------
template <int N>
struct BroadcastPlan {
  std::vector<int64_t> dims;                    // coalesced output dims, rank >= 1
  std::vector<std::array<int64_t, N>> strides;  // strides[d][k]: operand k's element stride on dim d
  int64_t numel = 0;
};

// Plan for operands `ins` (each broadcastable to `out`, numpy rules). `in_strides`, when given,
// overrides the contiguous broadcast strides of an operand (a full-rank stride vector for `out`).
template <int N>
BroadcastPlan<N> make_plan_from_strides(const std::vector<int64_t>& out,
                                        const std::array<std::vector<int64_t>, N>& st) {
  BroadcastPlan<N> p;
  p.numel = product(out);
  // Walk from the innermost dim outwards, dropping size-1 dims and merging a dim into the
  // current innermost group when every operand's stride is continuous across the boundary.
  std::vector<int64_t> dims;
  std::vector<std::array<int64_t, N>> strides;
  for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
    if (out[d] == 1) continue;
    std::array<int64_t, N> s{};
    for (int k = 0; k < N; ++k) s[k] = st[k][d];
    if (!dims.empty()) {
      bool merge = true;
      for (int k = 0; k < N; ++k)
        if (s[k] != strides.back()[k] * dims.back()) merge = false;
      if (merge) {
        dims.back() *= out[d];
        continue;
      }
    }
    dims.push_back(out[d]);
    strides.push_back(s);
  }
  if (dims.empty()) {
    dims.push_back(1);
    strides.push_back({});
  }
  std::reverse(dims.begin(), dims.end());
  std::reverse(strides.begin(), strides.end());
  p.dims = std::move(dims);
  p.strides = std::move(strides);
  return p;
}

template <int N>
BroadcastPlan<N> make_plan(const std::vector<int64_t>& out, const std::array<const std::vector<int64_t>*, N>& ins) {
  std::array<std::vector<int64_t>, N> st;
  for (int k = 0; k < N; ++k) st[k] = broadcast_strides(*ins[k], out);
  return make_plan_from_strides<N>(out, st);
}

// Calls row(off, inner_stride, pos, count) for every row piece of output elements
// [begin, end): `off[k]` is operand k's element offset of the piece's first element,
// `inner_stride[k]` its stride along the row, `pos` the output's linear index.
template <int N, class Row>
void for_each_row(const BroadcastPlan<N>& p, int64_t begin, int64_t end, Row&& row) {
  if (begin >= end) return;
  const int64_t r = static_cast<int64_t>(p.dims.size());
  const int64_t inner = p.dims.back();
  const std::array<int64_t, N>& is = p.strides.back();
  // Unravel the starting row index over the outer dims.
  int64_t row_i = begin / inner;
  int64_t j = begin % inner;
  std::vector<int64_t> idx(static_cast<size_t>(r - 1), 0);
  std::array<int64_t, N> base{};
  for (int64_t d = r - 2; d >= 0; --d) {
    const int64_t v = row_i % p.dims[d];
    row_i /= p.dims[d];
    idx[d] = v;
    for (int k = 0; k < N; ++k) base[k] += v * p.strides[d][k];
  }
  int64_t pos = begin;
  while (pos < end) {
    const int64_t cnt = std::min(inner - j, end - pos);
    std::array<int64_t, N> off;
    for (int k = 0; k < N; ++k) off[k] = base[k] + j * is[k];
    row(off, is, pos, cnt);
    pos += cnt;
    j = 0;
    if (pos >= end) break;
    for (int64_t d = r - 2; d >= 0; --d) {  // advance the outer index by one row
      if (++idx[d] < p.dims[d]) {
        for (int k = 0; k < N; ++k) base[k] += p.strides[d][k];
        break;
      }
      for (int k = 0; k < N; ++k) base[k] -= (p.dims[d] - 1) * p.strides[d][k];
      idx[d] = 0;
    }
  }
}

// parallel_for over the plan's output elements, row pieces as in for_each_row.
template <int N, class Row>
void parallel_rows(const BroadcastPlan<N>& p, Row&& row) {
  if (p.numel == 0) return;
  parallel_for(p.numel, kElementwiseGrain, [&](int64_t b, int64_t e) { for_each_row<N>(p, b, e, row); });
}

// ---- typed row loops -------------------------------------------------------
// o[i] = f(a[i*sa], b[i*sb]) with the common stride patterns as separate tight loops.
template <class A, class O, class F>
inline void binary_row(const A* a, int64_t sa, const A* b, int64_t sb, O* o, int64_t n, const F& f) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
  } else if (sa == 0 && sb == 1) {
    const A av = a[0];
    for (int64_t i = 0; i < n; ++i) o[i] = f(av, b[i]);
  } else if (sa == 1 && sb == 0) {
    const A bv = b[0];
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], bv);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i * sa], b[i * sb]);
  }
}

// Copies (or broadcasts) a strided row of elements of type U into contiguous `o`.
template <class U>
inline void copy_row(const U* src, int64_t s, U* o, int64_t n) {
  if (s == 1) std::memcpy(o, src, static_cast<size_t>(n) * sizeof(U));
  else if (s == 0) std::fill(o, o + n, src[0]);
  else
    for (int64_t i = 0; i < n; ++i) o[i] = src[i * s];
}

// Unsigned storage type of an element size, for dtype-agnostic data movement.
template <size_t Bytes> struct uint_of_size;
template <> struct uint_of_size<1> { using type = uint8_t; };
template <> struct uint_of_size<2> { using type = uint16_t; };
template <> struct uint_of_size<4> { using type = uint32_t; };
template <> struct uint_of_size<8> { using type = uint64_t; };

// Calls f.template operator()<U>() with U the unsigned type of `bytes` (1, 2, 4 or 8).
template <class F>
decltype(auto) visit_elem_size(size_t bytes, F&& f) {
  switch (bytes) {
    case 1: return f.template operator()<uint8_t>();
    case 2: return f.template operator()<uint16_t>();
    case 4: return f.template operator()<uint32_t>();
    case 8: return f.template operator()<uint64_t>();
    default: break;
  }
  throw Error("unsupported element size " + std::to_string(bytes));
}

// ---- span entry points (one dispatch per call) -----------------------------
// All pointers point at elements of the named dtype; strides are in elements (0 = broadcast).
// Integer Div/Mod/FMod check the divisor for zeros and throw rlx::Error.
void binary_span(BinaryKind k, DType t, const void* a, int64_t sa, const void* b, int64_t sb, void* out, int64_t n);
// out is bool (uint8 0/1).
void compare_span(CompareKind k, DType t, const void* a, int64_t sa, const void* b, int64_t sb, void* out,
                  int64_t n);
// cond is bool; a, b and out have element size `elem_bytes`.
void where_span(size_t elem_bytes, const uint8_t* cond, int64_t sc, const void* a, int64_t sa, const void* b,
                int64_t sb, void* out, int64_t n);
// Contiguous unary ops: out has dtype t (Activation) or `to` (Cast).
void activation_span(ActKind k, DType t, const void* in, void* out, int64_t n);
// `narrow` applies to casts to and from the storage-only dtypes (rlx/dtype_narrow.h).
void cast_span(DType from, DType to, const void* in, void* out, int64_t n, NarrowCast narrow = {});

}  // namespace rlx::cpu
