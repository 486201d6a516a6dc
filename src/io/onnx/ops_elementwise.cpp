// ONNX elementwise ops: arithmetic, comparison and logic, activations (direct or decomposed
// into IR elementwise ops), Cast/CastLike, Clip, Where, Identity, Dropout (inference).
#include <cmath>
#include <limits>

#include "io/onnx/importer.h"
#include "io/onnx/proto.h"

namespace rlx::onnx_io {
namespace {

using V = std::vector<Val>;

Converter binary(BinaryKind k) {
  return [k](const NodeCtx& c) -> V {
    c.allow_only({});
    Value a = c.value(0), b = c.value(1);
    if (k == BinaryKind::Pow) b = c.cast_to(b, c.shape(0).dtype);  // Pow allows a different exponent type
    return {c.out(c.g().binary(k, a, b))};
  };
}

Converter mod() {
  return [](const NodeCtx& c) -> V {
    c.allow_only({"fmod"});
    const bool fmod = c.i("fmod", 0) != 0;
    if (!fmod && is_float(c.shape(0).dtype)) c.fail("floating-point Mod requires fmod=1");
    return {c.out(c.g().binary(fmod ? BinaryKind::FMod : BinaryKind::Mod, c.value(0), c.value(1)))};
  };
}

// And / Or / Xor / Not take bool (logical); BitwiseAnd / Or / Xor / Not integers: the same IR
// kinds, told apart by the operands' dtype, which the ONNX type constraints fix.
void require_operand_kind(const NodeCtx& c, bool bitwise) {
  const DType t = c.shape(0).dtype;
  if (bitwise && !is_int(t)) c.fail(std::string("takes integer inputs, got ") + dtype_name(t));
  if (!bitwise && t != DType::Bool)
    c.fail(std::string("takes bool inputs, got ") + dtype_name(t) + " (the Bitwise* ops take integers)");
}

Converter logic(BinaryKind k, bool bitwise) {
  return [k, bitwise](const NodeCtx& c) -> V {
    c.allow_only({});
    require_operand_kind(c, bitwise);
    return {c.out(c.g().binary(k, c.value(0), c.value(1)))};
  };
}

Converter negation(bool bitwise) {
  return [bitwise](const NodeCtx& c) -> V {
    c.allow_only({});
    require_operand_kind(c, bitwise);
    return {c.out(c.g().act(ActKind::Not, c.value(0)))};
  };
}

Converter bit_shift() {
  return [](const NodeCtx& c) -> V {
    c.allow_only({"direction"});
    const std::string dir = c.s("direction", "");
    if (dir != "LEFT" && dir != "RIGHT") c.fail("attribute 'direction' must be \"LEFT\" or \"RIGHT\", got \"" + dir + "\"");
    return {c.out(c.g().binary(dir == "LEFT" ? BinaryKind::Shl : BinaryKind::Shr, c.value(0), c.value(1)))};
  };
}

Converter compare(CompareKind k) {
  return [k](const NodeCtx& c) -> V {
    c.allow_only({});
    return {c.out(c.g().compare(k, c.value(0), c.value(1)))};
  };
}

// Max/Min/Sum/Mean: variadic with broadcasting, folded left.
Converter variadic(BinaryKind k, bool mean) {
  return [k, mean](const NodeCtx& c) -> V {
    c.allow_only({});
    if (c.num_inputs() == 0) c.fail("needs at least one input");
    Value acc = c.value(0);
    for (size_t i = 1; i < c.num_inputs(); ++i) acc = c.g().binary(k, acc, c.value(i));
    if (c.num_inputs() == 1) acc = c.g().expand(acc, c.shape(0).dims);  // a fresh value, not an alias
    if (mean) acc = c.g().div(acc, c.scalar_like(static_cast<double>(c.num_inputs()), c.shape(0).dtype));
    return {c.out(acc)};
  };
}

Converter act(ActKind k) {
  return [k](const NodeCtx& c) -> V {
    c.allow_only({});
    return {c.out(c.g().act(k, c.value(0)))};
  };
}

// A unary op written as a function of (ctx, x).
template <class F>
Converter unary(std::initializer_list<const char*> attrs, F f) {
  std::vector<const char*> names(attrs);
  return [names, f](const NodeCtx& c) -> V {
    for (const auto& a : c.node().attribute()) {
      bool ok = false;
      for (const char* n : names) ok = ok || a.name() == n;
      if (!ok) c.fail("attribute '" + a.name() + "' is not supported");
    }
    const DType dt = c.shape(0).dtype;
    if (!is_float(dt)) c.fail("needs a floating-point input, got " + c.shape(0).str());
    // 16-bit floats compute in f32 and round once, like the operators' definitions.
    if (dt == DType::F16 || dt == DType::BF16) return {c.out(c.g().cast(f(c, c.g().cast(c.value(0), DType::F32)), dt))};
    return {c.out(f(c, c.value(0)))};
  };
}

Value k(const NodeCtx& c, Value like, double v) { return c.scalar_like(v, c.g().shape(like).dtype); }

Value where_neg(const NodeCtx& c, Value x, Value neg, Value pos) {
  return c.g().where(c.g().compare(CompareKind::Lt, x, k(c, x, 0.0)), neg, pos);
}

// Cast's attributes for the float8 targets: saturate (opset 19+, default 1) and round_mode
// (e8m0; "up", "down" or "nearest").
ops::Cast cast_op(const NodeCtx& c, DType to) {
  ops::Cast op;
  op.to = to;
  op.saturate = c.i("saturate", 1) != 0;
  const std::string mode = c.s("round_mode", "up");
  if (mode == "up") op.round_mode = E8M0Round::Up;
  else if (mode == "down") op.round_mode = E8M0Round::Down;
  else if (mode == "nearest") op.round_mode = E8M0Round::Nearest;
  else c.fail("round_mode '" + mode + "' is not one of up, down, nearest");
  return op;
}

V cast(const NodeCtx& c, DType to) {
  const DType from = c.shape(0).dtype;
  Value x = c.value(0);
  if (from == to) return {c.out(c.g().expand(x, c.shape(0).dims))};
  return {c.out(c.g().apply(cast_op(c, to), {x}))};
}

V clip(const NodeCtx& c) {
  Value x = c.value(0);
  const DType dt = c.shape(0).dtype;
  if (c.opset() < 11) {
    c.allow_only({"min", "max"});
    x = c.g().max(x, c.scalar_like(c.f("min", -std::numeric_limits<double>::infinity()), dt));
    x = c.g().min(x, c.scalar_like(c.f("max", std::numeric_limits<double>::infinity()), dt));
    return {c.out(x)};
  }
  c.allow_only({});
  if (c.present(1)) x = c.g().max(x, c.value(1));
  if (c.present(2)) x = c.g().min(x, c.value(2));
  if (!c.present(1) && !c.present(2)) x = c.g().expand(x, c.shape(0).dims);
  return {c.out(x)};
}

V dropout(const NodeCtx& c) {
  c.allow_only({"seed", "ratio", "is_test"});
  if (c.present(2) && c.scalar_input(2, "training_mode") != 0) {
    // Training mode drops elements at random, except with ratio 0.
    double ratio = 0.5;
    if (c.present(1)) {
      const Tensor& rt = c.konst(1, "ratio");
      if (rt.numel() != 1) c.fail("ratio must hold one value");
      ratio = rt.to_f64()[0];
    }
    if (ratio != 0.0) c.fail("training_mode=true with ratio > 0 is not supported (the mask is random)");
  }
  if (c.opset() < 7 && c.i("is_test", 0) == 0) c.fail("is_test=0 (training mode) is not supported");
  Value x = c.value(0);
  V outs{c.out(c.g().expand(x, c.shape(0).dims))};
  if (c.num_outputs() > 1 && !c.node().output(1).empty()) {
    const auto dims = c.shape(0).dims;
    Value one = c.g().constant(full_tensor(DType::Bool, {}, 1.0));
    outs.push_back(c.out(c.g().expand(one, dims)));
  }
  return outs;
}

V is_inf(const NodeCtx& c) {
  c.allow_only({"detect_positive", "detect_negative"});
  Value x = c.value(0);
  const double inf = std::numeric_limits<double>::infinity();
  const bool pos = c.i("detect_positive", 1) != 0, neg = c.i("detect_negative", 1) != 0;
  Value p = c.g().compare(CompareKind::Eq, x, k(c, x, inf));
  Value n = c.g().compare(CompareKind::Eq, x, k(c, x, -inf));
  if (pos && neg) return {c.out(c.g().binary(BinaryKind::Or, p, n))};
  if (pos) return {c.out(p)};
  if (neg) return {c.out(n)};
  Value f = c.g().constant(full_tensor(DType::Bool, {}, 0.0));
  return {c.out(c.g().expand(f, c.shape(0).dims))};
}

}  // namespace

void register_elementwise(ConverterTable& t) {
  t["Add"] = binary(BinaryKind::Add);
  t["Sub"] = binary(BinaryKind::Sub);
  t["Mul"] = binary(BinaryKind::Mul);
  t["Div"] = binary(BinaryKind::Div);
  t["Pow"] = binary(BinaryKind::Pow);
  t["Mod"] = mod();
  t["And"] = logic(BinaryKind::And, false);
  t["Or"] = logic(BinaryKind::Or, false);
  t["Xor"] = logic(BinaryKind::Xor, false);
  t["BitwiseAnd"] = logic(BinaryKind::And, true);
  t["BitwiseOr"] = logic(BinaryKind::Or, true);
  t["BitwiseXor"] = logic(BinaryKind::Xor, true);
  t["BitwiseNot"] = negation(true);
  t["BitShift"] = bit_shift();
  t["Equal"] = compare(CompareKind::Eq);
  t["Less"] = compare(CompareKind::Lt);
  t["LessOrEqual"] = compare(CompareKind::Le);
  t["Greater"] = compare(CompareKind::Gt);
  t["GreaterOrEqual"] = compare(CompareKind::Ge);
  t["Max"] = variadic(BinaryKind::Max, false);
  t["Min"] = variadic(BinaryKind::Min, false);
  t["Sum"] = variadic(BinaryKind::Add, false);
  t["Mean"] = variadic(BinaryKind::Add, true);

  t["Relu"] = act(ActKind::Relu);
  t["Sigmoid"] = act(ActKind::Sigmoid);
  t["Tanh"] = act(ActKind::Tanh);
  t["Exp"] = act(ActKind::Exp);
  t["Log"] = act(ActKind::Log);
  t["Sqrt"] = act(ActKind::Sqrt);
  t["Neg"] = act(ActKind::Neg);
  t["Abs"] = act(ActKind::Abs);
  t["Sin"] = act(ActKind::Sin);
  t["Cos"] = act(ActKind::Cos);
  t["Tan"] = act(ActKind::Tan);
  t["Atan"] = act(ActKind::Atan);
  t["Asin"] = act(ActKind::Asin);
  t["Acos"] = act(ActKind::Acos);
  t["Round"] = act(ActKind::Round);
  t["Erf"] = act(ActKind::Erf);
  t["Floor"] = act(ActKind::Floor);
  t["Ceil"] = act(ActKind::Ceil);
  t["Reciprocal"] = act(ActKind::Reciprocal);
  t["Sign"] = act(ActKind::Sign);
  t["Softplus"] = act(ActKind::Softplus);
  t["Not"] = negation(false);

  t["Sinh"] = unary({}, [](const NodeCtx& c, Value x) {
    auto& g = c.g();
    return g.mul(g.sub(g.exp(x), g.exp(g.act(ActKind::Neg, x))), k(c, x, 0.5));
  });
  t["Cosh"] = unary({}, [](const NodeCtx& c, Value x) {
    auto& g = c.g();
    return g.mul(g.add(g.exp(x), g.exp(g.act(ActKind::Neg, x))), k(c, x, 0.5));
  });
  t["Asinh"] = unary({}, [](const NodeCtx& c, Value x) {
    auto& g = c.g();
    return g.act(ActKind::Log, g.add(x, g.act(ActKind::Sqrt, g.add(g.mul(x, x), k(c, x, 1.0)))));
  });
  t["Acosh"] = unary({}, [](const NodeCtx& c, Value x) {
    auto& g = c.g();
    return g.act(ActKind::Log, g.add(x, g.act(ActKind::Sqrt, g.sub(g.mul(x, x), k(c, x, 1.0)))));
  });
  t["Atanh"] = unary({}, [](const NodeCtx& c, Value x) {
    auto& g = c.g();
    Value r = g.div(g.add(k(c, x, 1.0), x), g.sub(k(c, x, 1.0), x));
    return g.mul(g.act(ActKind::Log, r), k(c, x, 0.5));
  });
  t["Softsign"] = unary({}, [](const NodeCtx& c, Value x) {
    return c.g().div(x, c.g().add(k(c, x, 1.0), c.g().act(ActKind::Abs, x)));
  });
  t["LeakyRelu"] = unary({"alpha"}, [](const NodeCtx& c, Value x) {
    return where_neg(c, x, c.g().mul(x, k(c, x, c.f("alpha", 0.01))), x);
  });
  t["Elu"] = unary({"alpha"}, [](const NodeCtx& c, Value x) {
    auto& g = c.g();
    Value neg = g.mul(g.sub(g.exp(x), k(c, x, 1.0)), k(c, x, c.f("alpha", 1.0)));
    return where_neg(c, x, neg, x);
  });
  t["Selu"] = unary({"alpha", "gamma"}, [](const NodeCtx& c, Value x) {
    auto& g = c.g();
    const double alpha = c.f("alpha", 1.67326319217681884765625), gamma = c.f("gamma", 1.05070102214813232421875);
    Value neg = g.mul(g.sub(g.exp(x), k(c, x, 1.0)), k(c, x, alpha));
    Value le = g.compare(CompareKind::Le, x, k(c, x, 0.0));
    return g.mul(g.where(le, neg, x), k(c, x, gamma));
  });
  t["Celu"] = unary({"alpha"}, [](const NodeCtx& c, Value x) {
    auto& g = c.g();
    const double alpha = c.f("alpha", 1.0);
    Value e = g.mul(g.sub(g.exp(g.div(x, k(c, x, alpha))), k(c, x, 1.0)), k(c, x, alpha));
    return g.add(g.max(x, k(c, x, 0.0)), g.min(e, k(c, x, 0.0)));
  });
  t["HardSigmoid"] = unary({"alpha", "beta"}, [](const NodeCtx& c, Value x) {
    auto& g = c.g();
    Value y = g.add(g.mul(x, k(c, x, c.f("alpha", 0.2))), k(c, x, c.f("beta", 0.5)));
    return g.max(g.min(y, k(c, x, 1.0)), k(c, x, 0.0));
  });
  t["HardSwish"] = unary({}, [](const NodeCtx& c, Value x) {
    auto& g = c.g();
    Value y = g.add(g.mul(x, k(c, x, 1.0 / 6.0)), k(c, x, 0.5));
    return g.mul(x, g.max(g.min(y, k(c, x, 1.0)), k(c, x, 0.0)));
  });
  t["Mish"] = unary({}, [](const NodeCtx& c, Value x) {
    return c.g().mul(x, c.g().tanh(c.g().act(ActKind::Softplus, x)));
  });
  t["Swish"] = unary({"alpha"}, [](const NodeCtx& c, Value x) {
    return c.g().mul(x, c.g().sigmoid(c.g().mul(x, k(c, x, c.f("alpha", 1.0)))));
  });
  t["Gelu"] = unary({"approximate"}, [](const NodeCtx& c, Value x) {
    const std::string a = c.s("approximate", "none");
    if (a != "none" && a != "tanh") c.fail("approximate='" + a + "' is not one of 'none', 'tanh'");
    return c.g().act(a == "tanh" ? ActKind::GeluApprox : ActKind::Gelu, x);
  });
  t["ThresholdedRelu"] = unary({"alpha"}, [](const NodeCtx& c, Value x) {
    Value gt = c.g().compare(CompareKind::Gt, x, k(c, x, c.f("alpha", 1.0)));
    return c.g().where(gt, x, k(c, x, 0.0));
  });
  t["Shrink"] = [](const NodeCtx& c) -> V {
    c.allow_only({"bias", "lambd"});
    auto& g = c.g();
    Value x = c.value(0);
    const DType dt = c.shape(0).dtype;
    const double bias = c.f("bias", 0.0), lambd = c.f("lambd", 0.5);
    auto kk = [&](double v) { return c.scalar_like(v, dt); };
    Value lo = g.compare(CompareKind::Lt, x, kk(-lambd)), hi = g.compare(CompareKind::Gt, x, kk(lambd));
    Value r = g.where(hi, g.sub(x, kk(bias)), g.expand(kk(0.0), c.shape(0).dims));
    return {c.out(g.where(lo, g.add(x, kk(bias)), r))};
  };
  t["PRelu"] = [](const NodeCtx& c) -> V {
    c.allow_only({});
    Value x = c.value(0);
    return {c.out(where_neg(c, x, c.g().mul(x, c.value(1)), x))};
  };
  t["SwiGLU"] = [](const NodeCtx& c) -> V {  // a * sigmoid(alpha * a) * b
    c.allow_only({"alpha"});
    auto& g = c.g();
    const DType dt = c.shape(0).dtype;
    if (!is_float(dt)) c.fail("needs floating-point inputs");
    const DType work = dt == DType::F16 || dt == DType::BF16 ? DType::F32 : dt;
    Value a = c.cast_to(c.value(0), work), b = c.cast_to(c.value(1), work);
    Value y = g.mul(g.mul(a, g.sigmoid(g.mul(a, k(c, a, c.f("alpha", 1.0))))), b);
    return {c.out(c.cast_to(y, dt))};
  };
  t["Clip"] = clip;
  t["Where"] = [](const NodeCtx& c) -> V {
    c.allow_only({});
    return {c.out(c.g().where(c.value(0), c.value(1), c.value(2)))};
  };
  t["IsNaN"] = [](const NodeCtx& c) -> V {
    c.allow_only({});
    Value x = c.value(0);
    return {c.out(c.g().compare(CompareKind::Ne, x, x))};
  };
  t["IsInf"] = is_inf;
  t["Identity"] = [](const NodeCtx& c) -> V {
    c.allow_only({});
    const Val& v = c.in(0);
    if (v.konst || v.dims) return {v};
    return {c.out(c.g().expand(c.value(0), c.shape(0).dims))};
  };
  t["Dropout"] = dropout;
  t["Cast"] = [](const NodeCtx& c) -> V {
    c.allow_only({"to", "saturate", "round_mode"});
    if (!c.has("to")) c.fail("attribute 'to' is required");
    const DType to = dtype_from_onnx(static_cast<int32_t>(c.i("to", 0)), c.where());
    const Val& v = c.in(0);
    if (v.dims && !v.konst && is_int(to)) {  // a symbolic shape value stays one
      Val r = v;
      r.shape.dtype = to;
      return {r};
    }
    return cast(c, to);
  };
  t["CastLike"] = [](const NodeCtx& c) -> V {
    c.allow_only({"saturate", "round_mode"});
    const DType to = c.shape(1).dtype;
    const Val& v = c.in(0);  // only input 0's value matters
    if (v.konst && !is_storage_only(to) && !is_storage_only(v.konst->dtype())) return {Val::known(v.konst->cast(to))};
    return cast(c, to);
  };
}

}  // namespace rlx::onnx_io
