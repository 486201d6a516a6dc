// Elementwise parity cases: binary broadcasts of every kind, integer / bool ops, integer
// division, every activation, compare / where / cast, and chains that fuse into one region, in
// f32, the half types and f64.
#include <string>
#include <vector>

#include "parity/parity_cases.h"

namespace rlx::testing {

namespace {

constexpr DType kFloats[] = {DType::F32, DType::F16, DType::BF16};
constexpr BinaryKind kFloatBinaries[] = {BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul,
                                         BinaryKind::Div, BinaryKind::Max, BinaryKind::Min,
                                         BinaryKind::Pow, BinaryKind::Mod, BinaryKind::FMod};

std::string dt(DType t) { return dtype_name(t); }

// Input ranges where the activation is defined and well conditioned.
ParityOptions act_options(ActKind kind) {
  ParityOptions o;
  if (kind == ActKind::Log || kind == ActKind::Sqrt || kind == ActKind::Rsqrt) o.lo = 0.05, o.hi = 3.0;
  if (kind == ActKind::Reciprocal) o.lo = 0.5, o.hi = 2.0;
  if (kind == ActKind::Round) o.lo = -4, o.hi = 4;
  return o;
}

// Divisors without zeros: -3..3 but 0 (or 1..5 unsigned), broadcast along the first axis.
Tensor nonzero_divisors(DType t, bool allow_negative) {
  std::vector<double> v;
  for (int i = 0; i < 19; ++i) {
    int d = i % 7 - 3;
    if (!allow_negative) d = i % 5 + 1;
    v.push_back(d == 0 ? 5 : d);
  }
  return from_doubles(t, {19}, v);
}

void add_binaries(CaseList& l) {
  // [3, 1, 37] x [5, 1] (f64: [3, 1, 41] x [6, 1]): both operands broadcast.
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64})
    for (BinaryKind k : kFloatBinaries)
      add_case(l, "elementwise", std::string("binary_") + enum_name(k) + "_" + dt(t), [t, k] {
        const bool f64 = t == DType::F64;
        Graph g;
        const Value a = g.input("a", Shape::of({3, 1, f64 ? 41 : 37}, t));
        const Value b = g.input("b", Shape::of({f64 ? 6 : 5, 1}, t));
        g.add_output(g.binary(k, a, b));
        ParityOptions o;
        if (k == BinaryKind::Pow) o.lo = 0.1, o.hi = 2.0;  // real powers of positive bases
        return one(std::move(g), o);
      });
  for (DType t : {DType::I32, DType::I64, DType::U8})
    add_case(l, "elementwise", "integer_ops_" + dt(t), [t] {
      Graph g;
      const Value a = g.input("a", Shape::of({4, 33}, t));
      const Value b = g.input("b", Shape::of({33}, t));
      const Value s = g.binary(BinaryKind::Mul, g.binary(BinaryKind::Sub, a, b), a);
      g.add_output(g.max(s, b));
      g.add_output(g.compare(CompareKind::Ge, a, b));
      g.add_output(g.act(ActKind::Neg, a));
      return one(std::move(g));
    });
  // Bitwise and / or / xor / not, and shifts of the unsigned types by amounts past the width.
  for (DType t : {DType::I32, DType::I64, DType::U8, DType::U32})
    add_case(l, "elementwise", "bitwise_" + dt(t), [t] {
      Graph g;
      const Value a = g.input("a", Shape::of({4, 33}, t));
      const Value b = g.input("b", Shape::of({33}, t));
      g.add_output(g.binary(BinaryKind::Xor, g.binary(BinaryKind::And, a, b), g.act(ActKind::Not, a)));
      g.add_output(g.binary(BinaryKind::Or, a, b));
      if (!is_signed_int(t)) {
        g.add_output(g.binary(BinaryKind::Shl, a, b));
        g.add_output(g.binary(BinaryKind::Shr, g.act(ActKind::Not, a), b));
      }
      ParityOptions o;
      o.int_hi = t == DType::U8 ? 11 : 37;  // shift amounts up to the width and beyond
      return one(std::move(g), o);
    });
  add_case(l, "elementwise", "bool_ops", [] {
    Graph g;
    const Value a = g.input("a", Shape::of({64}, DType::Bool));
    const Value b = g.input("b", Shape::of({64}, DType::Bool));
    g.add_output(g.binary(BinaryKind::Xor, a, g.act(ActKind::Not, b)));
    g.add_output(g.binary(BinaryKind::And, a, b));
    return one(std::move(g));
  });
}

void add_integer_division(CaseList& l) {
  for (DType t : {DType::I8, DType::U8, DType::I16, DType::I32, DType::U32, DType::I64})
    for (BinaryKind k : {BinaryKind::Div, BinaryKind::Mod, BinaryKind::FMod, BinaryKind::Pow})
      add_case(l, "elementwise", std::string("int_") + enum_name(k) + "_" + dt(t), [t, k] {
        const bool is_signed = t != DType::U8 && t != DType::U32;
        Graph g;
        const Value a = g.input("a", Shape::of({7, 19}, t));
        const Value b = g.input("b", Shape::of({19}, t));
        g.add_output(g.binary(k, a, b));
        ParityOptions o;
        o.int_hi = 120;  // a in [0, 120): with negative divisors, mixed signs
        o.fixed_inputs.emplace_back("b", nonzero_divisors(t, is_signed));
        return one(std::move(g), o);
      });
  // Negative dividends, INT_MIN / -1 (wraps), negative exponents (1, -1, 0 for |base| > 1).
  add_case(l, "elementwise", "int_division_edges_i32", [] {
    Graph g;
    const Value a = g.input("a", Shape::of({6}, DType::I32));
    const Value b = g.input("b", Shape::of({6}, DType::I32));
    g.add_output(g.div(a, b));
    g.add_output(g.binary(BinaryKind::Mod, a, b));
    g.add_output(g.binary(BinaryKind::FMod, a, b));
    g.add_output(g.pow(a, g.sub(g.scalar(0, DType::I32), g.binary(BinaryKind::Mod, b, g.scalar(3, DType::I32)))));
    ParityOptions o;
    o.fixed_inputs.emplace_back("a", from_doubles(DType::I32, {6}, {-7, 7, -2147483648.0, 1, -1, 5}));
    o.fixed_inputs.emplace_back("b", from_doubles(DType::I32, {6}, {2, -2, -1, -5, 3, 4}));
    return one(std::move(g), o);
  });
}

void add_activations(CaseList& l) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64})
    for (int k = 0; k <= static_cast<int>(ActKind::Acos); ++k) {
      const auto kind = static_cast<ActKind>(k);
      add_case(l, "elementwise", std::string("act_") + enum_name(kind) + "_" + dt(t), [t, kind] {
        Graph g;
        g.add_output(g.act(kind, g.input("x", t == DType::F64 ? Shape::of({5, 67}, t) : Shape::of({7, 129}, t))));
        return one(std::move(g), act_options(kind));
      });
    }
}

void add_compare_where_cast(CaseList& l) {
  for (DType t : kFloats)
    add_case(l, "elementwise", "compare_where_cast_" + dt(t), [t] {
      Graph g;
      const Value a = g.input("a", Shape::of({2, 3, 40}, t));
      const Value b = g.input("b", Shape::of({3, 1}, t));
      for (CompareKind k : {CompareKind::Eq, CompareKind::Ne, CompareKind::Lt, CompareKind::Le, CompareKind::Gt,
                            CompareKind::Ge})
        g.add_output(g.compare(k, a, b));
      g.add_output(g.where(g.compare(CompareKind::Gt, a, b), a, b));
      g.add_output(g.cast(a, DType::I32));
      g.add_output(g.cast(g.cast(a, DType::F32), DType::BF16));
      g.add_output(g.cast(g.cast(g.input("i", Shape::of({40}, DType::I64)), t), DType::F16));
      ParityOptions o;
      o.lo = -5, o.hi = 5;
      return one(std::move(g), o);
    });
  // Casts both ways (f32 -> f64 keeps every bit; f64 -> f16 rounds through f32 as the CPU does),
  // a compare and a where, integer casts.
  add_case(l, "elementwise", "compare_where_cast_f64", [] {
    Graph g;
    const Value x = g.input("x", Shape::of({4, 33}, DType::F32));
    const Value y = g.input("y", Shape::of({33}, DType::F64));
    const Value xd = g.cast(x, DType::F64);
    const Value w = g.where(g.compare(CompareKind::Gt, xd, y), g.mul(xd, y), g.sub(y, xd));
    g.add_output(w);
    g.add_output(g.cast(w, DType::F16));
    g.add_output(g.cast(g.mul(w, g.scalar(100.0, DType::F64)), DType::I32));
    g.add_output(g.cast(g.cast(g.mul(y, g.scalar(10.0, DType::F64)), DType::I64), DType::F64));
    return one(std::move(g));
  });
  for (DType t : kFloats)
    add_case(l, "elementwise", "region_chain_" + dt(t), [t] {
      Graph g;
      const Value x = g.input("x", Shape::of({4, 16, 96}, t));
      const Value b = g.input("b", Shape::of({96}, t));
      const Value y = g.gelu(g.add(g.mul(x, g.scalar(0.5, t)), b));
      g.add_output(g.sub(g.silu(y), g.tanh(x)));
      return one(std::move(g));
    });
}

}  // namespace

void add_elementwise_cases(CaseList& l) {
  add_binaries(l);
  add_integer_division(l);
  add_activations(l);
  add_compare_where_cast(l);
}

}  // namespace rlx::testing
