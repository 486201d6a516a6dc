// Shape inference for the elementwise family: Binary, Compare, Where, Activation, Cast and
// ElementwiseRegion.
//
// Dtype rules (the CPU kernels in src/backends/cpu/kernels_{elementwise,activation,cast,region}.cpp
// implement exactly these):
//  - Binary: both operands share a dtype; the result has it. And/Or/Xor take bool only;
//    Max/Min take every dtype (on bool: or/and); the arithmetic kinds (Add, Sub, Mul, Div,
//    Pow, Mod, FMod) take floats and integers but not bool.
//  - Compare: both operands share a dtype (any); the result is bool.
//  - Where: cond is bool, a and b share a dtype (any); the result has it.
//  - Activation: Not takes bool only; Neg/Abs/Relu/Sign take floats and integers; every other
//    kind takes floats only. The result has the input's dtype.
//  - Cast: any dtype to any dtype (the storage-only ones too: rlx/dtype_narrow.h).
// Operands broadcast with numpy rules (symbolic dims broadcast by name; a symbolic dim
// against a static one binds to the static size).
// ElementwiseRegion: the output shape is the broadcast of every external input; each step
// follows the rules of its standalone op and may only use inputs and earlier steps.
#include <string>
#include <vector>

#include "rlx/error.h"
#include "rlx/ops.h"

namespace rlx {
namespace {

std::vector<Dim> broadcast_all(const std::string& what, std::span<const Shape> in, const char* const* names) {
  std::vector<Dim> out;
  for (size_t i = 0; i < in.size(); ++i) {
    auto b = broadcast_dims(out, in[i].dims);
    if (!b) {
      std::string list;
      for (size_t j = 0; j <= i; ++j)
        list += (j ? ", " : "") + (names ? std::string(names[j]) : "input " + std::to_string(j)) + " " + in[j].str();
      throw Error(what + ": operand shapes do not broadcast: " + list +
                  " (numpy rules: aligned from the right, each dim must match or be 1)");
    }
    out = std::move(*b);
  }
  return out;
}

const char* const kBinaryNames[] = {"lhs", "rhs"};
const char* const kWhereNames[] = {"cond", "a", "b"};

// Result dtype of a Binary op; `a`/`b` describe the operands for messages.
DType binary_dtype(BinaryKind k, DType ta, DType tb, const std::string& what, const std::string& a,
                   const std::string& b) {
  if (ta != tb)
    throw Error(what + ": operand dtypes differ (lhs " + a + ", rhs " + b +
                "); both operands must have the same dtype (insert a cast)");
  const bool logical = k == BinaryKind::And || k == BinaryKind::Or || k == BinaryKind::Xor;
  if (logical && ta != DType::Bool && !is_int(ta))
    throw Error(what + ": needs bool (logical) or integer (bitwise) operands, got " + a +
                " (use cast to bool, or a compare)");
  if ((k == BinaryKind::Shl || k == BinaryKind::Shr) && !(is_int(ta) && !is_signed_int(ta)))
    throw Error(what + ": shifts take unsigned integers (u8, u16, u32, u64), got " + a +
                " (cast to the unsigned dtype of the same width first)");
  if (!logical && k != BinaryKind::Max && k != BinaryKind::Min && ta == DType::Bool)
    throw Error(what + ": bool operands are not supported (got " + a +
                "); use and/or/xor, or cast to an integer or float dtype");
  return ta;
}

DType compare_dtype(DType ta, DType tb, const std::string& what, const std::string& a, const std::string& b) {
  if (ta != tb)
    throw Error(what + ": operand dtypes differ (lhs " + a + ", rhs " + b +
                "); both operands must have the same dtype (insert a cast)");
  return DType::Bool;
}

DType where_dtype(DType tc, DType ta, DType tb, const std::string& what, const std::string& c, const std::string& a,
                  const std::string& b) {
  if (tc != DType::Bool) throw Error(what + ": cond must be bool, got " + c + " (use a compare or cast to bool)");
  if (ta != tb)
    throw Error(what + ": a and b must have the same dtype, got a " + a + " and b " + b + " (insert a cast)");
  return ta;
}

DType activation_dtype(ActKind k, DType t, const std::string& what, const std::string& x) {
  if (k == ActKind::Not) {
    if (t != DType::Bool && !is_int(t))
      throw Error(what + ": needs a bool (logical not) or integer (bitwise not) input, got " + x);
  } else if (k == ActKind::Neg || k == ActKind::Abs || k == ActKind::Relu || k == ActKind::Sign) {
    if (t == DType::Bool)
      throw Error(what + ": bool input " + x + " is not supported (takes floats and integers; use not for bool)");
  } else if (!is_float(t)) {
    throw Error(what + ": needs a float input (f32, f16, bf16, f64), got " + x + " (cast it to a float dtype first)");
  }
  return t;
}

void check_dtype_value(DType t, const std::string& what) {
  if (!is_valid_dtype(t))
    throw Error(what + ": invalid target dtype value " + std::to_string(static_cast<int>(t)));
}

template <class E>
void check_enum_value(E e, const std::string& what) {
  if (static_cast<size_t>(e) >= EnumNames<E>::names.size())
    throw Error(what + ": invalid kind value " + std::to_string(static_cast<int>(e)));
}

// A region step's `op` integer must name a value of E.
template <class E>
void check_op_value(int32_t op, const std::string& what) {
  if (op < 0 || static_cast<size_t>(op) >= EnumNames<E>::names.size())
    throw Error(what + ": invalid op value " + std::to_string(op) + " (valid: 0.." +
                std::to_string(EnumNames<E>::names.size() - 1) + ")");
}

}  // namespace

std::vector<Shape> ops::Binary::infer(std::span<const Shape> in) const {
  const std::string what = std::string("binary ") + enum_name(kind);
  check_enum_value(kind, "binary");
  const DType t = binary_dtype(kind, in[0].dtype, in[1].dtype, what, in[0].str(), in[1].str());
  return {Shape(broadcast_all(what, in, kBinaryNames), t)};
}

std::vector<Shape> ops::Compare::infer(std::span<const Shape> in) const {
  const std::string what = std::string("compare ") + enum_name(kind);
  check_enum_value(kind, "compare");
  const DType t = compare_dtype(in[0].dtype, in[1].dtype, what, in[0].str(), in[1].str());
  return {Shape(broadcast_all(what, in, kBinaryNames), t)};
}

std::vector<Shape> ops::Where::infer(std::span<const Shape> in) const {
  const DType t = where_dtype(in[0].dtype, in[1].dtype, in[2].dtype, "where", in[0].str(), in[1].str(), in[2].str());
  return {Shape(broadcast_all("where", in, kWhereNames), t)};
}

std::vector<Shape> ops::Activation::infer(std::span<const Shape> in) const {
  check_enum_value(kind, "activation");
  const DType t = activation_dtype(kind, in[0].dtype, std::string("activation ") + enum_name(kind), in[0].str());
  return {Shape(in[0].dims, t)};
}

std::vector<Shape> ops::Cast::infer(std::span<const Shape> in) const {
  check_dtype_value(to, "cast");
  check_enum_value(round_mode, "cast round_mode");
  return {Shape(in[0].dims, to)};
}

std::vector<Shape> ops::ElementwiseRegion::infer(std::span<const Shape> in) const {
  if (steps.empty()) throw Error("elementwise_region: needs at least one step");
  const std::vector<Dim> dims = broadcast_all("elementwise_region", in, nullptr);
  std::vector<DType> sdt;
  sdt.reserve(steps.size());
  for (size_t s = 0; s < steps.size(); ++s) {
    const RegionStep& st = steps[s];
    const std::string where_s = "elementwise_region step " + std::to_string(s);
    if (static_cast<size_t>(st.kind) >= EnumNames<RegionStepKind>::names.size())
      throw Error(where_s + ": invalid step kind value " + std::to_string(static_cast<int>(st.kind)));
    std::string what = where_s + " (" + enum_name(st.kind);
    size_t arity = 1;
    switch (st.kind) {
      case RegionStepKind::Binary:
        check_op_value<BinaryKind>(st.op, where_s + " (binary)");
        what += std::string(" ") + enum_name(static_cast<BinaryKind>(st.op));
        arity = 2;
        break;
      case RegionStepKind::Compare:
        check_op_value<CompareKind>(st.op, where_s + " (compare)");
        what += std::string(" ") + enum_name(static_cast<CompareKind>(st.op));
        arity = 2;
        break;
      case RegionStepKind::Activation:
        check_op_value<ActKind>(st.op, where_s + " (activation)");
        what += std::string(" ") + enum_name(static_cast<ActKind>(st.op));
        break;
      case RegionStepKind::Cast:
        check_dtype_value(st.to, where_s + " (cast)");
        what += std::string(" to ") + dtype_name(st.to);
        break;
      case RegionStepKind::Where: arity = 3; break;
    }
    what += ")";
    if (st.args.size() != arity)
      throw Error(what + ": expects " + std::to_string(arity) + " argument(s), got " + std::to_string(st.args.size()));
    std::vector<DType> at;
    std::vector<std::string> ad;
    for (int32_t a : st.args) {
      if (a >= 0) {
        if (static_cast<size_t>(a) >= in.size())
          throw Error(what + ": argument " + std::to_string(a) + " refers to external input " + std::to_string(a) +
                      " but the region has " + std::to_string(in.size()) + " input(s)");
        at.push_back(in[static_cast<size_t>(a)].dtype);
        ad.push_back("input " + std::to_string(a) + " " + in[static_cast<size_t>(a)].str());
      } else {
        const int64_t j = -static_cast<int64_t>(a) - 1;
        if (j >= static_cast<int64_t>(s))
          throw Error(what + ": argument " + std::to_string(a) + " refers to step " + std::to_string(j) +
                      ", which is not an earlier step (arguments < 0 name step -arg-1, which must come before step " +
                      std::to_string(s) + ")");
        at.push_back(sdt[static_cast<size_t>(j)]);
        ad.push_back("step " + std::to_string(j) + " result (" + dtype_name(sdt[static_cast<size_t>(j)]) + ")");
      }
    }
    DType r = DType::F32;
    switch (st.kind) {
      case RegionStepKind::Binary: r = binary_dtype(static_cast<BinaryKind>(st.op), at[0], at[1], what, ad[0], ad[1]); break;
      case RegionStepKind::Compare: r = compare_dtype(at[0], at[1], what, ad[0], ad[1]); break;
      case RegionStepKind::Activation: r = activation_dtype(static_cast<ActKind>(st.op), at[0], what, ad[0]); break;
      case RegionStepKind::Cast: r = st.to; break;
      case RegionStepKind::Where: r = where_dtype(at[0], at[1], at[2], what, ad[0], ad[1], ad[2]); break;
    }
    sdt.push_back(r);
  }
  return {Shape(dims, sdt.back())};
}

}  // namespace rlx
