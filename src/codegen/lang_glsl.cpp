// GLSL 4.5 (Vulkan compute, compiled to SPIR-V) spelling of elementwise chains.
//
// Every dtype is held natively (8/16/64-bit types through GL_EXT_shader_explicit_arithmetic_types
// and the 8/16-bit storage extensions; bf16 as its 16 bits in a uint16_t). Integers compute in
// their own width, where SPIR-V arithmetic wraps; floats in f32 (f64 in double, which GLSL has no
// transcendental functions for). erf, log1p and a large-argument-safe tanh are helpers; Pow, Mod
// and FMod are helpers with the C semantics GLSL's pow/mod lack (negative bases, truncation).
#include "codegen/language.h"
#include "rlx/error.h"

namespace rlx::codegen {
namespace {


// Float helpers, written for the type F (float or double).
const char* kErf = R"(F rlx_erf_F(F x) {
  F a = abs(x);
  if (a < F(0.5)) {
    F x2 = x * x;
    return x * (F(1.1283791671) + x2 * (F(-0.3761263890) + x2 * (F(0.1128379167) + x2 * (F(-0.0268661706) + x2 * F(0.0052239776)))));
  }
  F t = F(1.0) / (F(1.0) + F(0.3275911) * a);
  F p = ((((F(1.061405429) * t - F(1.453152027)) * t + F(1.421413741)) * t - F(0.284496736)) * t + F(0.254829592)) * t;
  F y = F(1.0) - p * exp(-a * a);
  return x < F(0.0) ? -y : y;
}
)";
// asin on [-0.5, 0.5]: x + x^3 * P(x^2), P the first 8 terms of the Maclaurin series of asin
// (relative error below 5e-8 there). Vulkan lets asin/acos be as loose as atan (thousands of
// ulp; lavapipe's differ from libm by 4e-4), so rlx computes them from this and sqrt.
const char* kAsinSmall = R"(F rlx_asin_small_F(F x) {
  F t = x * x;
  F p = F(0.01396484375);
  p = p * t + F(0.017352764423076924);
  p = p * t + F(0.022372159090909092);
  p = p * t + F(0.030381944444444444);
  p = p * t + F(0.044642857142857144);
  p = p * t + F(0.075);
  p = p * t + F(0.16666666666666666);
  return x + x * t * p;
}
)";
// |x| > 1 is NaN (GLSL's sqrt of a negative number is undefined, so it is not left to sqrt).
const char* kAsin = R"(F rlx_asin_F(F x) {
  F a = abs(x);
  if (a > F(1.0)) return uintBitsToFloat(0x7fc00000u);
  if (a <= F(0.5)) return rlx_asin_small_F(x);
  F r = F(1.5707963267948966) - F(2.0) * rlx_asin_small_F(sqrt((F(1.0) - a) * F(0.5)));
  return x < F(0.0) ? -r : r;
}
)";
const char* kAcos = R"(F rlx_acos_F(F x) {
  F a = abs(x);
  if (a > F(1.0)) return uintBitsToFloat(0x7fc00000u);
  if (a <= F(0.5)) return F(1.5707963267948966) - rlx_asin_small_F(x);
  F r = F(2.0) * rlx_asin_small_F(sqrt((F(1.0) - a) * F(0.5)));
  return x < F(0.0) ? F(3.141592653589793) - r : r;
}
)";
const char* kLog1p = R"(F rlx_log1p_F(F x) {
  F u = F(1.0) + x;
  if (u == F(1.0) || isinf(u)) return u == F(1.0) ? x : u;
  return log(u) * (x / (u - F(1.0)));
}
)";
const char* kTanh = R"(F rlx_tanh_F(F x) {
  F a = abs(x);
  if (a < F(0.004)) return x;
  F e = exp(F(-2.0) * a);
  F t = (F(1.0) - e) / (F(1.0) + e);
  return x < F(0.0) ? -t : t;
}
)";
const char* kPow = R"(F rlx_pow_F(F a, F b) {
  if (b == F(0.0) || a == F(1.0)) return F(1.0);
  if (isnan(a) || isnan(b)) return a + b;
  F m = a == F(0.0) ? (b < F(0.0) ? F(1.0) / F(a) : F(0.0)) : pow(abs(a), b);
  if (a < F(0.0)) {
    if (floor(b) != b) return F(uintBitsToFloat(0x7fc00000u));
    if (mod(b, F(2.0)) == F(1.0)) return -m;
  }
  return m;
}
)";
const char* kFmod = R"(F rlx_fmod_F(F a, F b) { return a - b * trunc(a / b); }
)";
const char* kModFloor = R"(F rlx_mod_floor_F(F a, F b) {
  F r = a - b * trunc(a / b);
  if (r != F(0.0)) { if ((r < F(0.0)) != (b < F(0.0))) r += b; }
  else r = b < F(0.0) ? F(-0.0) : F(0.0);
  return r;
}
)";

const char* kBf16 = R"(uint rlx_bf16_bits(float x) {
  uint u = floatBitsToUint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
)";

// x rounded to the nearest f16 value (ties to even), as f32, by its bits. Not
// float(float16_t(x)): NVIDIA's compiler folds that round trip away.
const char* kRoundF16 = R"(float rlx_round_f16(float x) {
  uint u = floatBitsToUint(x);
  uint a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return x;
  uint s = u & 0x80000000u;
  if (a >= 0x477ff000u) return uintBitsToFloat(s | 0x7f800000u);
  if (a < 0x38800000u) {
    float r = roundEven(uintBitsToFloat(a) * 16777216.0) * (1.0 / 16777216.0);
    return uintBitsToFloat(s | floatBitsToUint(r));
  }
  a = (a + 0x0fffu + ((a >> 13) & 1u)) & ~0x1fffu;
  return uintBitsToFloat(s | a);
}
)";

// Integer helpers for the type T (S = true when signed); E(code) reports an error.
const char* kIntDiv = R"(T rlx_int_div_T(T a, T b) {
  if (b == T(0)) { atomicMax(rlx_err.code, 6); return T(0); }
  if (S && b == T(-1)) return T(0) - a;
  return a / b;
}
)";
const char* kIntMod = R"(T rlx_int_mod_T(T a, T b) {
  if (b == T(0)) { atomicMax(rlx_err.code, 6); return T(0); }
  if (S && b == T(-1)) return T(0);
  T r = a - (a / b) * b;
  if (S && r != T(0) && ((r < T(0)) != (b < T(0)))) r = r + b;
  return r;
}
)";
const char* kIntFmod = R"(T rlx_int_fmod_T(T a, T b) {
  if (b == T(0)) { atomicMax(rlx_err.code, 6); return T(0); }
  if (S && b == T(-1)) return T(0);
  return a - (a / b) * b;
}
)";
const char* kIntPow = R"(T rlx_int_pow_T(T base, T e) {
  if (S && e < T(0)) {
    if (base == T(1)) return T(1);
    if (base == T(-1)) return (e & T(1)) != T(0) ? T(-1) : T(1);
    if (base == T(0)) atomicMax(rlx_err.code, 7);
    return T(0);
  }
  T r = T(1), b = base, x = e;
  while (x != T(0)) { if ((x & T(1)) != T(0)) r = r * b; b = b * b; x = x >> 1; }
  return r;
}
)";

// Fills the type placeholders of a helper: F (float type) or T / S (integer type, signedness).
std::string float_helper(const char* src, const std::string& F) {
  std::string s = replace_all(src, "_F(", "_" + F + "(");
  s = replace_all(s, "F(", F + "(");
  s = replace_all(s, "F ", F + " ");
  return s;
}
std::string int_helper(const char* src, const std::string& T, bool is_signed) {
  std::string s = replace_all(src, "_T(", "_" + T + "(");
  s = replace_all(s, "T(", T + "(");
  s = replace_all(s, "T ", T + " ");
  return replace_all(s, "(S && ", is_signed ? "(true && " : "(false && ");
}

const char* int_source(BinaryKind k) {
  switch (k) {
    case BinaryKind::Div: return kIntDiv;
    case BinaryKind::Mod: return kIntMod;
    case BinaryKind::FMod: return kIntFmod;
    default: return kIntPow;
  }
}

class Glsl final : public Language {
 public:
  LangId id() const override { return LangId::Glsl; }
  std::optional<DType> storage_dtype(DType t) const override {
    if (!gpu_dtype(t)) return std::nullopt;
    return t;
  }
  bool has_math(MathFn f, DType t) const override {
    if (t == DType::F32) return true;
    if (t != DType::F64) return false;
    // GLSL has no double exp/log/trigonometry.
    return f == MathFn::Sqrt || f == MathFn::Floor || f == MathFn::Ceil || f == MathFn::RoundEven ||
           f == MathFn::Abs || f == MathFn::Max;
  }

  std::string storage_type(DType t) const override {
    switch (t) {
      case DType::F32: return "float";
      case DType::F16: return "float16_t";
      case DType::BF16: return "uint16_t";
      case DType::F64: return "double";
      case DType::I8: return "int8_t";
      case DType::I16: return "int16_t";
      case DType::I32: return "int";
      case DType::I64: return "int64_t";
      case DType::U8: return "uint8_t";
      case DType::U32: return "uint";
      case DType::Bool: return "uint8_t";
      default: break;  // not held (storage_dtype)
    }
    return "?";
  }
  std::string compute_type(DType t) const override {
    if (t == DType::F32 || t == DType::F16 || t == DType::BF16) return "float";
    if (t == DType::Bool) return "bool";
    return storage_type(t);
  }
  std::unique_ptr<ExprPrinter> float_printer(DType t, Helpers& h) const override {
    return std::make_unique<GlslFloatFixed>(t == DType::F64 ? DType::F64 : DType::F32, h);
  }
  std::string load(DType t, const std::string& raw) const override {
    if (t == DType::F16) return "float(" + raw + ")";
    if (t == DType::BF16) return "uintBitsToFloat(uint(" + raw + ") << 16)";
    if (t == DType::Bool) return "(" + raw + " != uint8_t(0))";
    return raw;
  }
  std::string store(DType t, const std::string& v) const override {
    if (t == DType::F16) return "float16_t(" + v + ")";
    if (t == DType::BF16) return "uint16_t(rlx_bf16_bits(" + v + "))";
    if (t == DType::Bool) return "(" + v + " ? uint8_t(1) : uint8_t(0))";
    return v;
  }
  void dtype_helpers(DType t, Helpers& h) const override {
    if (t == DType::BF16) h.add("rlx_bf16_bits", kBf16);
    if (t == DType::F16) h.add("rlx_round_f16", kRoundF16);
  }
  std::string round(DType t, const std::string& v) const override {
    if (t == DType::F16) return "rlx_round_f16(" + v + ")";
    if (t == DType::BF16) return "uintBitsToFloat(rlx_bf16_bits(" + v + ") << 16)";
    return v;
  }

  std::string binary(BinaryKind k, DType t, const std::string& a, const std::string& b, Helpers& h,
                     bool* error_flag) const override {
    if (t == DType::Bool) {
      if (std::string e = logical(k, a, b); !e.empty()) return e;
    } else if (is_float(t)) {
      if (std::string e = float_arith(k, a, b); !e.empty()) return e;
      const std::string F = compute_type(t);
      auto helper = [&](const char* name, const char* src) {
        h.add(std::string(name) + "_" + F, float_helper(src, F));
        return std::string(name) + "_" + F + "(" + a + ", " + b + ")";
      };
      switch (k) {
        case BinaryKind::Max: return "((" + a + " > " + b + " || isnan(" + a + ")) ? " + a + " : " + b + ")";
        case BinaryKind::Min: return "((" + a + " < " + b + " || isnan(" + a + ")) ? " + a + " : " + b + ")";
        case BinaryKind::Pow:
          if (t == DType::F64) break;  // GLSL has no double pow
          return helper("rlx_pow", kPow);
        case BinaryKind::Mod: return helper("rlx_mod_floor", kModFloor);
        case BinaryKind::FMod: return helper("rlx_fmod", kFmod);
        default: break;
      }
    } else {
      const std::string T = compute_type(t);
      if (const char* name = int_checked_helper(k)) {
        if (error_flag) *error_flag = true;
        h.add(std::string(name) + "_" + T, int_helper(int_source(k), T, is_signed_int(t)));
        return std::string(name) + "_" + T + "(" + a + ", " + b + ")";
      }
      switch (k) {
        case BinaryKind::Add: return T + infix(a, "+", b);
        case BinaryKind::Sub: return T + infix(a, "-", b);
        case BinaryKind::Mul: return T + infix(a, "*", b);
        case BinaryKind::Max: return "(" + a + " > " + b + " ? " + a + " : " + b + ")";
        case BinaryKind::Min: return "(" + a + " < " + b + " ? " + a + " : " + b + ")";
        case BinaryKind::And: return T + infix(a, "&", b);
        case BinaryKind::Or: return T + infix(a, "|", b);
        case BinaryKind::Xor: return T + infix(a, "^", b);
        case BinaryKind::Shl:
        case BinaryKind::Shr:  // unsigned (the IR's rule); the bit width or more shifts everything out
          return "(" + b + " >= " + T + "(" + std::to_string(8 * dtype_size(t)) + ") ? " + T + "(0) : " + T +
                 infix(a, k == BinaryKind::Shl ? "<<" : ">>", b) + ")";
        default: break;
      }
    }
    throw Error(std::string("GLSL elementwise: binary ") + enum_name(k) + " is not supported for " + dtype_name(t));
  }

  std::string compare(CompareKind k, DType t, const std::string& a, const std::string& b) const override {
    if (t == DType::Bool) return infix("uint(" + a + ")", compare_op(k), "uint(" + b + ")");
    return infix(a, compare_op(k), b);
  }

  std::string activation(ActKind k, DType t, const std::string& x, Helpers& h) const override {
    if (t == DType::Bool) {
      if (k == ActKind::Not) return "(!" + x + ")";
    } else if (is_float(t)) {
      if (has_float_formula(k)) return print_activation(k, *float_printer(t, h), x);
    } else {
      const std::string T = compute_type(t);
      const std::string zero = T + "(0)";
      const bool sgn = is_signed_int(t);
      switch (k) {
        case ActKind::Neg: return T + "(" + zero + " - " + x + ")";
        case ActKind::Abs: return sgn ? "(" + x + " < " + zero + " ? " + T + "(" + zero + " - " + x + ") : " + x + ")" : x;
        case ActKind::Relu: return sgn ? "(" + x + " < " + zero + " ? " + zero + " : " + x + ")" : x;
        case ActKind::Sign:
          return "(" + x + " > " + zero + " ? " + T + "(1) : " +
                 (sgn ? "(" + x + " < " + zero + " ? " + T + "(-1) : " + zero + ")" : zero) + ")";
        case ActKind::Not: return T + "(~" + x + ")";
        default: break;
      }
    }
    throw Error(std::string("GLSL elementwise: activation ") + enum_name(k) + " is not supported for " + dtype_name(t));
  }

  std::string cast(DType to, DType from, const std::string& x) const override {
    const std::string C = compute_type(to);
    if (from == DType::Bool) {
      if (to == DType::Bool) return x;
      return "(" + x + " ? " + C + "(1) : " + C + "(0))";
    }
    if (to == DType::Bool) return "(" + x + " != " + compute_type(from) + "(0))";
    return C + "(" + x + ")";
  }
  std::string where(const std::string& c, const std::string& a, const std::string& b) const override {
    return "(" + c + " ? " + a + " : " + b + ")";
  }

 private:
  // The float printer with its helpers' type placeholders filled.
  class GlslFloatFixed final : public ExprPrinter {
   public:
    GlslFloatFixed(DType t, Helpers& h) : t_(t), h_(h) {}
    std::string literal(double v) const override { return float_literal(v, t_, t_ == DType::F64 ? "lf" : ""); }
    std::string call(MathFn f, const std::vector<std::string>& args) const override {
      const std::string F = t_ == DType::F64 ? "double" : "float";
      auto helper = [&](const char* name, const char* src) {
        h_.add(std::string(name) + "_" + F, float_helper(src, F));
        return std::string(name) + "_" + F;
      };
      std::string fn;
      switch (f) {
        case MathFn::Erf: fn = helper("rlx_erf", kErf); break;
        case MathFn::Log1p: fn = helper("rlx_log1p", kLog1p); break;
        case MathFn::Tanh: fn = helper("rlx_tanh", kTanh); break;
        case MathFn::Asin:
          helper("rlx_asin_small", kAsinSmall);
          fn = helper("rlx_asin", kAsin);
          break;
        case MathFn::Acos:
          helper("rlx_asin_small", kAsinSmall);
          fn = helper("rlx_acos", kAcos);
          break;
        case MathFn::RoundEven: fn = "roundEven"; break;
        default: fn = math_fn_name(f); break;
      }
      return call_expr(fn, args);
    }
    std::string select(const std::string& c, const std::string& a, const std::string& b) const override {
      return "(" + c + " ? " + a + " : " + b + ")";
    }

   private:
    DType t_;
    Helpers& h_;
  };
};

}  // namespace

const Language& glsl_language() {
  static const Glsl l;
  return l;
}

}  // namespace rlx::codegen
