// WGSL (WebGPU) spelling of elementwise chains.
//
// WGSL has 32-bit scalars only (f16 behind an extension), no isnan (implementations may assume
// finite math) and one element type per binding, so every buffer is an array of u32 words and
// every element takes one word: f32 / i32 / u32 are bitcast, f16 and bf16 are held as f32 words
// rounded to their precision on every store, bool / u8 as u32 words, i8 / i16 as sign-extended
// i32 words, i64 as i32 words (narrowed: the runtime must check that values fit). f64 cannot
// be held. Sub-word integers wrap by masking or sign-extending after every step.
#include "codegen/language.h"
#include "rlx/error.h"

namespace rlx::codegen {
namespace {


const char* kIsNan = R"(fn rlx_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
)";
const char* kErf = R"(fn rlx_erf(x: f32) -> f32 {
  let a = abs(x);
  if (a < 0.5f) {
    let x2 = x * x;
    return x * (1.1283791671f + x2 * (-0.3761263890f + x2 * (0.1128379167f + x2 * (-0.0268661706f + x2 * 0.0052239776f))));
  }
  let t = 1.0f / (1.0f + 0.3275911f * a);
  let p = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f) * t;
  let y = 1.0f - p * exp(-a * a);
  return select(y, -y, x < 0.0f);
}
)";
const char* kLog1p = R"(fn rlx_log1p(x: f32) -> f32 {
  let u = 1.0f + x;
  if (u == 1.0f) { return x; }
  if (bitcast<u32>(u) == 0x7f800000u) { return u; }
  return log(u) * (x / (u - 1.0f));
}
)";
const char* kTanh = R"(fn rlx_tanh(x: f32) -> f32 {
  let a = abs(x);
  if (a < 0.004f) { return x; }
  let e = exp(-2.0f * a);
  let t = (1.0f - e) / (1.0f + e);
  return select(t, -t, x < 0.0f);
}
)";
// A float from its bits at run time: WGSL evaluates bitcast<f32>(constant) at compile time and
// rejects infinities and NaNs there.
const char* kF32Bits = R"(fn rlx_f32_bits(u: u32) -> f32 { return bitcast<f32>(u); }
)";
const char* kPow = R"(fn rlx_pow(a: f32, b: f32) -> f32 {
  if (b == 0.0f || a == 1.0f) { return 1.0f; }
  if (rlx_isnan(a) || rlx_isnan(b)) { return a + b; }
  var m = 0.0f;
  if (a == 0.0f) {
    if (b < 0.0f) { m = rlx_f32_bits(0x7f800000u); }
  } else {
    m = pow(abs(a), b);
  }
  if (a < 0.0f) {
    if (floor(b) != b) { return rlx_f32_bits(0x7fc00000u); }
    if (b - 2.0f * floor(b * 0.5f) == 1.0f) { return -m; }
  }
  return m;
}
)";
const char* kFmod = R"(fn rlx_fmod(a: f32, b: f32) -> f32 { return a - b * trunc(a / b); }
)";
const char* kModFloor = R"(fn rlx_mod_floor(a: f32, b: f32) -> f32 {
  var r = a - b * trunc(a / b);
  if (r != 0.0f) {
    if ((r < 0.0f) != (b < 0.0f)) { r += b; }
  } else {
    r = select(0.0f, -0.0f, b < 0.0f);
  }
  return r;
}
)";
// f32 -> the nearest f16 value (as f32): WGSL's pack2x16float leaves values beyond f16's finite
// range indeterminate, so overflow (to +-inf, from 65520 on) and NaN are handled here.
const char* kF16Round = R"(fn rlx_f16_round(x: f32) -> f32 {
  let u = bitcast<u32>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) { return x; }
  if (abs(x) >= 65520.0f) { return bitcast<f32>((u & 0x80000000u) | 0x7f800000u); }
  return unpack2x16float(pack2x16float(vec2<f32>(x, 0.0f))).x;
}
)";
const char* kBf16 = R"(fn rlx_bf16_bits(x: f32) -> u32 {
  let u = bitcast<u32>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) { return (u >> 16u) | 0x40u; }
  return (u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u;
}
)";

// Integer helpers over T (i32 or u32); S is true when signed.
const char* kIntDiv = R"(fn rlx_int_div_T(a: T, b: T) -> T {
  if (b == T(0)) { atomicMax(&rlx_err, 6); return T(0); }
  if (S && b == T(-1)) { return T(0) - a; }
  return a / b;
}
)";
const char* kIntMod = R"(fn rlx_int_mod_T(a: T, b: T) -> T {
  if (b == T(0)) { atomicMax(&rlx_err, 6); return T(0); }
  if (S && b == T(-1)) { return T(0); }
  var r = a - (a / b) * b;
  if (S && r != T(0) && ((r < T(0)) != (b < T(0)))) { r = r + b; }
  return r;
}
)";
const char* kIntFmod = R"(fn rlx_int_fmod_T(a: T, b: T) -> T {
  if (b == T(0)) { atomicMax(&rlx_err, 6); return T(0); }
  if (S && b == T(-1)) { return T(0); }
  return a - (a / b) * b;
}
)";
const char* kIntPow = R"(fn rlx_int_pow_T(base: T, e: T) -> T {
  if (S && e < T(0)) {
    if (base == T(1)) { return T(1); }
    if (base == T(-1)) { return select(T(1), T(-1), (e & T(1)) != T(0)); }
    if (base == T(0)) { atomicMax(&rlx_err, 7); }
    return T(0);
  }
  var r = T(1);
  var b = base;
  var x = e;
  while (x != T(0)) {
    if ((x & T(1)) != T(0)) { r = r * b; }
    b = b * b;
    x = x >> 1u;
  }
  return r;
}
)";

std::string int_helper(const char* src, const std::string& T, bool is_signed) {
  std::string s = replace_all(src, "_T(", "_" + T + "(");
  s = replace_all(s, "T(-1)", is_signed ? "-1i" : "0xffffffffu");
  s = replace_all(s, "T(", T + "(");
  s = replace_all(s, ": T", ": " + T);
  s = replace_all(s, "-> T", "-> " + T);
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

// sin and cos to about 1 ulp on |x| < 2^17 (WGSL's builtins promise only 2^-11 absolute error, and
// SwiftShader's reach that): x reduced by pi/2 in three parts (Cody-Waite), then polynomials on
// [-pi/4, pi/4] chosen by the quadrant.
const char* kSinCos = R"(fn rlx_sincos_q(x: f32, q_add: i32) -> f32 {
  if (abs(x) > 1.0e30f || x != x) { return x - x; }
  let k = round(x * 0.636619772f);
  var r = x - k * 1.5703125f;
  r = r - k * 4.83751297e-4f;
  r = r - k * 7.54978995e-8f;
  let q = (i32(k) + q_add) & 3;
  let r2 = r * r;
  let s = r + r * r2 * (-1.66666546e-1f + r2 * (8.33216087e-3f + r2 * -1.95152959e-4f));
  let c = 1.0f - 0.5f * r2 + r2 * r2 * (4.16664568e-2f + r2 * (-1.38873163e-3f + r2 * 2.44331571e-5f));
  if (q == 0) { return s; }
  if (q == 1) { return c; }
  if (q == 2) { return -s; }
  return -c;
}
fn rlx_sin(x: f32) -> f32 { return rlx_sincos_q(x, 0); }
fn rlx_cos(x: f32) -> f32 { return rlx_sincos_q(x, 1); }
)";

// i64 is held in 32-bit words: arithmetic whose result leaves that range reports it (code
// kErrNarrowOverflow) instead of wrapping.
const char* kI64Checked = R"(fn rlx_i64_add(a: i32, b: i32) -> i32 {
  let r = a + b;
  if (((a ^ r) & (b ^ r)) < 0i) { atomicMax(&rlx_err, 8); }
  return r;
}
fn rlx_i64_sub(a: i32, b: i32) -> i32 {
  let r = a - b;
  if (((a ^ b) & (a ^ r)) < 0i) { atomicMax(&rlx_err, 8); }
  return r;
}
fn rlx_i64_mul(a: i32, b: i32) -> i32 {
  let r = a * b;
  let lowest = -2147483647i - 1i;
  if ((a == -1i && b == lowest) || (b == -1i && a == lowest) || (a != 0i && a != -1i && r / a != b)) {
    atomicMax(&rlx_err, 8);
  }
  return r;
}
fn rlx_i64_pow(base: i32, e: i32) -> i32 {
  if (e < 0i) {
    if (base == 1i) { return 1i; }
    if (base == -1i) { return select(1i, -1i, (e & 1i) != 0i); }
    if (base == 0i) { atomicMax(&rlx_err, 7); }
    return 0i;
  }
  var r = 1i;
  var b = base;
  var x = e;
  while (x != 0i) {
    if ((x & 1i) != 0i) { r = rlx_i64_mul(r, b); }
    x = x >> 1u;
    if (x != 0i) { b = rlx_i64_mul(b, b); }
  }
  return r;
}
)";

class WgslFloat final : public ExprPrinter {
 public:
  explicit WgslFloat(Helpers& h) : h_(h) {}
  std::string literal(double v) const override { return float_literal(v, DType::F32, "f"); }
  std::string call(MathFn f, const std::vector<std::string>& args) const override {
    std::string fn;
    switch (f) {
      case MathFn::Erf: h_.add("rlx_erf", kErf); fn = "rlx_erf"; break;
      case MathFn::Log1p: h_.add("rlx_log1p", kLog1p); fn = "rlx_log1p"; break;
      case MathFn::Tanh: h_.add("rlx_tanh", kTanh); fn = "rlx_tanh"; break;
      case MathFn::Sin: h_.add("rlx_sincos", kSinCos); fn = "rlx_sin"; break;
      case MathFn::Cos: h_.add("rlx_sincos", kSinCos); fn = "rlx_cos"; break;
      case MathFn::RoundEven: fn = "round"; break;  // WGSL's round is half to even
      default: fn = math_fn_name(f); break;
    }
    return call_expr(fn, args);
  }
  std::string select(const std::string& c, const std::string& a, const std::string& b) const override {
    return "select(" + b + ", " + a + ", " + c + ")";
  }

 private:
  Helpers& h_;
};

class Wgsl final : public Language {
 public:
  LangId id() const override { return LangId::Wgsl; }
  std::optional<DType> storage_dtype(DType t) const override {
    switch (t) {
      case DType::F32:
      case DType::F16:
      case DType::BF16: return DType::F32;
      case DType::I8:
      case DType::I16:
      case DType::I32:
      case DType::I64: return DType::I32;
      case DType::U8:
      case DType::U32:
      case DType::Bool: return DType::U32;
      default: return std::nullopt;  // f64, u16, u64 and the storage-only dtypes
    }
  }
  bool has_math(MathFn, DType t) const override { return t == DType::F32; }

  std::string storage_type(DType) const override { return "u32"; }
  std::string compute_type(DType t) const override {
    if (is_float(t)) return "f32";
    if (t == DType::Bool) return "bool";
    return is_signed_int(t) ? "i32" : "u32";
  }
  std::unique_ptr<ExprPrinter> float_printer(DType, Helpers& h) const override { return std::make_unique<WgslFloat>(h); }
  std::string load(DType t, const std::string& raw) const override {
    if (is_float(t)) return "bitcast<f32>(" + raw + ")";
    if (t == DType::Bool) return "(" + raw + " != 0u)";
    return is_signed_int(t) ? "bitcast<i32>(" + raw + ")" : raw;
  }
  std::string store(DType t, const std::string& v) const override {
    if (t == DType::Bool) return "select(0u, 1u, " + v + ")";
    if (is_float(t) || is_signed_int(t)) return "bitcast<u32>(" + v + ")";
    return v;
  }
  void dtype_helpers(DType t, Helpers& h) const override {
    if (t == DType::BF16) h.add("rlx_bf16_bits", kBf16);
    if (t == DType::F16) h.add("rlx_f16_round", kF16Round);
  }
  std::string round(DType t, const std::string& v) const override {
    switch (t) {
      case DType::F16: return "rlx_f16_round(" + v + ")";
      case DType::BF16: return "bitcast<f32>(rlx_bf16_bits(" + v + ") << 16u)";
      case DType::U8: return "(" + v + " & 0xffu)";
      case DType::I8: return "((" + v + " << 24u) >> 24u)";
      case DType::I16: return "((" + v + " << 16u) >> 16u)";
      default: return v;
    }
  }

  std::string binary(BinaryKind k, DType t, const std::string& a, const std::string& b, Helpers& h,
                     bool* error_flag) const override {
    if (t == DType::Bool) {
      if (std::string e = logical(k, a, b); !e.empty()) return e;
    } else if (is_float(t)) {
      if (std::string e = float_arith(k, a, b); !e.empty()) return e;
      auto helper = [&](const char* name, const char* src) {
        if (k == BinaryKind::Pow) h.add("rlx_isnan", kIsNan), h.add("rlx_f32_bits", kF32Bits);
        h.add(name, src);
        return std::string(name) + "(" + a + ", " + b + ")";
      };
      switch (k) {
        case BinaryKind::Max:
          h.add("rlx_isnan", kIsNan);
          return "select(" + b + ", " + a + ", " + a + " > " + b + " || rlx_isnan(" + a + "))";
        case BinaryKind::Min:
          h.add("rlx_isnan", kIsNan);
          return "select(" + b + ", " + a + ", " + a + " < " + b + " || rlx_isnan(" + a + "))";
        case BinaryKind::Pow: return helper("rlx_pow", kPow);
        case BinaryKind::Mod: return helper("rlx_mod_floor", kModFloor);
        case BinaryKind::FMod: return helper("rlx_fmod", kFmod);
        default: break;
      }
    } else {
      const std::string T = compute_type(t);
      if (t == DType::I64 && (k == BinaryKind::Add || k == BinaryKind::Sub || k == BinaryKind::Mul || k == BinaryKind::Pow)) {
        if (error_flag) *error_flag = true;
        h.add("rlx_i64_checked", kI64Checked);
        const char* fn = k == BinaryKind::Add ? "rlx_i64_add" : k == BinaryKind::Sub ? "rlx_i64_sub"
                         : k == BinaryKind::Mul ? "rlx_i64_mul" : "rlx_i64_pow";
        return std::string(fn) + "(" + a + ", " + b + ")";
      }
      if (const char* name = int_checked_helper(k)) {
        if (error_flag) *error_flag = true;
        h.add(std::string(name) + "_" + T, int_helper(int_source(k), T, is_signed_int(t)));
        return std::string(name) + "_" + T + "(" + a + ", " + b + ")";
      }
      switch (k) {
        case BinaryKind::Add: return infix(a, "+", b);
        case BinaryKind::Sub: return infix(a, "-", b);
        case BinaryKind::Mul: return infix(a, "*", b);
        case BinaryKind::Max: return "max(" + a + ", " + b + ")";
        case BinaryKind::Min: return "min(" + a + ", " + b + ")";
        case BinaryKind::And: return infix(a, "&", b);
        case BinaryKind::Or: return infix(a, "|", b);
        case BinaryKind::Xor: return infix(a, "^", b);
        case BinaryKind::Shl:
        case BinaryKind::Shr: {  // unsigned (the IR's rule: u8, u32 here), held in u32; round() narrows
          const std::string bits = std::to_string(8 * dtype_size(t)) + "u";
          return "select(" + infix(a, k == BinaryKind::Shl ? "<<" : ">>", "min(" + b + ", 31u)") + ", 0u, " + b +
                 " >= " + bits + ")";
        }
        default: break;
      }
    }
    throw Error(std::string("WGSL elementwise: binary ") + enum_name(k) + " is not supported for " + dtype_name(t));
  }

  std::string compare(CompareKind k, DType t, const std::string& a, const std::string& b) const override {
    if (t == DType::Bool) return infix("u32(" + a + ")", compare_op(k), "u32(" + b + ")");
    if (!is_float(t)) return infix(a, compare_op(k), b);
    // WGSL lets implementations assume no NaN (x != x may fold to false): NaN operands are tested
    // by their bits, so every comparison with a NaN is false and != is true, as on the CPU.
    const std::string nan = "(((bitcast<u32>(" + a + ") & 0x7fffffffu) > 0x7f800000u) || ((bitcast<u32>(" + b +
                            ") & 0x7fffffffu) > 0x7f800000u))";
    if (k == CompareKind::Ne) return "(" + nan + " || " + infix(a, "!=", b) + ")";
    return "(!" + nan + " && " + infix(a, compare_op(k), b) + ")";
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
        case ActKind::Neg: return "(" + zero + " - " + x + ")";
        case ActKind::Abs: return sgn ? "select(" + x + ", " + zero + " - " + x + ", " + x + " < " + zero + ")" : x;
        case ActKind::Relu: return sgn ? "max(" + x + ", " + zero + ")" : x;
        case ActKind::Sign: return sgn ? "sign(" + x + ")" : "select(0u, 1u, " + x + " > 0u)";
        case ActKind::Not: return "(~" + x + ")";
        default: break;
      }
    }
    throw Error(std::string("WGSL elementwise: activation ") + enum_name(k) + " is not supported for " + dtype_name(t));
  }

  std::string cast(DType to, DType from, const std::string& x) const override {
    const std::string C = compute_type(to);
    if (from == DType::Bool) return to == DType::Bool ? x : "select(" + C + "(0), " + C + "(1), " + x + ")";
    if (to == DType::Bool) return "(" + x + " != " + compute_type(from) + "(0))";
    return C + "(" + x + ")";
  }
  std::string where(const std::string& c, const std::string& a, const std::string& b) const override {
    return "select(" + b + ", " + a + ", " + c + ")";
  }
};

}  // namespace

const Language& wgsl_language() {
  static const Wgsl l;
  return l;
}

}  // namespace rlx::codegen
