// Reduce parity cases: every kind over contiguous, strided, general and all axes in the float
// types; integer reductions (wrapping sums and products, truncating means, the 64-bit extremes),
// bool Max / Min, empty Sum / Prod; f64 reductions, softmax and cumsum accumulating in double.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "parity/parity_cases.h"

namespace rlx::testing {

namespace {

constexpr DType kFloats[] = {DType::F32, DType::F16, DType::BF16};
constexpr DType kInts[] = {DType::I8, DType::I16, DType::I32, DType::I64, DType::U8, DType::U32};
constexpr ReduceKind kKinds[] = {ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max, ReduceKind::Min, ReduceKind::Prod};

std::string dt(DType t) { return dtype_name(t); }

// Contiguous rows, a middle axis (columns), general axes, all axes, two strided groups.
const std::vector<std::vector<int64_t>>& axes_list() {
  static const std::vector<std::vector<int64_t>> v = {{-1}, {1}, {0, 2}, {}, {1, 3}};
  return v;
}

// Values of x [4, 6, 5, 7] that make sums and products overflow the narrow types, with negative
// ones for the signed types (so a mean truncates toward zero from both sides).
std::vector<double> int_values(DType t, size_t n) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t a = static_cast<int64_t>((i * 37 + 11) % 101);  // 0..100
    v[i] = static_cast<double>(is_signed_int(t) ? a - 50 : a);
  }
  return v;
}

void add_float(CaseList& l) {
  for (DType t : kFloats)
    for (ReduceKind k : kKinds)
      add_case(l, "reduce", std::string("reduce_") + enum_name(k) + "_" + dt(t), [t, k] {
        std::vector<CaseGraph> v;
        for (const auto& axes : axes_list()) {
          Graph g;
          g.add_output(g.reduce(k, g.input("x", Shape::of({4, 6, 5, 7}, t)), axes, axes.size() == 1));
          ParityOptions o;
          if (k == ReduceKind::Prod) o.lo = 0.9, o.hi = 1.1;
          v.push_back({"axes " + dims_str(axes), std::move(g), o});
        }
        return v;
      });
  add_case(l, "reduce", "reduce_softmax_cumsum_f64", [] {
    Graph g;
    const Value x = g.input("x", Shape::of({6, 300}, DType::F64));
    const Value z = g.input("z", Shape::of({4, 9, 5, 3}, DType::F64));
    for (ReduceKind k : kKinds) {
      g.add_output(g.reduce(k, x, {1}));           // rows
      g.add_output(g.reduce(k, z, {1}));           // columns
      g.add_output(g.reduce(k, z, {0, 2}, true));  // any axes
    }
    g.add_output(g.softmax(x, -1));
    g.add_output(g.log_softmax(x, -1));
    g.add_output(g.softmax(z, 1));
    g.add_output(g.cumsum(x, 1));
    g.add_output(g.cumsum(z, 1, true, true));
    ParityOptions o;
    o.lo = 0.5, o.hi = 1.5;  // products of 300 factors stay finite
    return one(std::move(g), o);
  });
  // A long sum whose f32 accumulation would miss the 1e-9 tolerance.
  add_case(l, "reduce", "sum_long_row_f64", [] {
    Graph s;
    s.add_output(s.sum(s.input("x", Shape::of({2, 100000}, DType::F64)), {1}));
    return one(std::move(s));
  });
}

void add_integer(CaseList& l) {
  for (DType t : kInts)
    for (ReduceKind k : kKinds)
      add_case(l, "reduce", std::string("reduce_") + enum_name(k) + "_" + dt(t), [t, k] {
        std::vector<CaseGraph> v;
        for (const auto& axes : axes_list()) {
          Graph g;
          g.add_output(g.reduce(k, g.input("x", Shape::of({4, 6, 5, 7}, t)), axes, axes.size() == 1));
          ParityOptions o;
          o.fixed_inputs = {{"x", from_doubles(t, {4, 6, 5, 7}, int_values(t, 4 * 6 * 5 * 7))}};
          v.push_back({"axes " + dims_str(axes), std::move(g), o});
        }
        return v;
      });
  // A row long enough for every warp of a block (4096 elements: 1024 threads) and many rows.
  for (DType t : {DType::I32, DType::I64, DType::U8})
    add_case(l, "reduce", "reduce_long_rows_" + dt(t), [t] {
      std::vector<CaseGraph> v;
      for (ReduceKind k : {ReduceKind::Sum, ReduceKind::Max, ReduceKind::Min, ReduceKind::Mean}) {
        Graph g;
        g.add_output(g.reduce(k, g.input("x", Shape::of({3, 5000}, t)), {1}));
        ParityOptions o;
        o.fixed_inputs = {{"x", from_doubles(t, {3, 5000}, int_values(t, 15000))}};
        v.push_back({enum_name(k), std::move(g), o});
      }
      return v;
    });
  // i64 values no double holds exactly: the extremes, their sum wrapping, Max / Min picking them.
  add_case(l, "reduce", "reduce_extremes_i64", [] {
    const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
    const std::vector<int64_t> x = {hi, 1, 3, -5, lo, (int64_t{1} << 53) + 1, 7, hi - 2, lo + 3, -1, 2, 9};
    std::vector<CaseGraph> v;
    for (ReduceKind k : kKinds)
      for (int64_t axis : {1, 0}) {
        Graph g;
        g.add_output(g.reduce(k, g.input("x", Shape::of({3, 4}, DType::I64)), {axis}));
        ParityOptions o;
        o.fixed_inputs = {{"x", Tensor::i64({3, 4}, x)}};
        v.push_back({std::string(enum_name(k)) + " axis " + std::to_string(axis), std::move(g), o});
      }
    return v;
  });
  // Bool Max is any, Min is all; rows all false, mixed, all true.
  add_case(l, "reduce", "reduce_any_all_bool", [] {
    std::vector<CaseGraph> v;
    for (ReduceKind k : {ReduceKind::Max, ReduceKind::Min}) {
      Graph g;
      const Value x = g.input("x", Shape::of({3, 4}, DType::Bool));
      g.add_output(g.reduce(k, x, {1}));
      g.add_output(g.reduce(k, x, {0}));
      ParityOptions o;
      o.fixed_inputs = {{"x", from_doubles(DType::Bool, {3, 4}, {0, 0, 0, 0, 0, 1, 0, 1, 1, 1, 1, 1})}};
      v.push_back({enum_name(k), std::move(g), o});
    }
    return v;
  });
  // Sum and Prod of nothing are their identities.
  add_case(l, "reduce", "reduce_empty_axis_i32", [] {
    std::vector<CaseGraph> v;
    for (ReduceKind k : {ReduceKind::Sum, ReduceKind::Prod}) {
      Graph g;
      g.add_output(g.reduce(k, g.input("x", Shape::of({3, 0}, DType::I32)), {1}));
      v.push_back({enum_name(k), std::move(g), {}});
    }
    return v;
  });
}

}  // namespace

void add_reduce_cases(CaseList& l) {
  add_float(l);
  add_integer(l);
}

}  // namespace rlx::testing
