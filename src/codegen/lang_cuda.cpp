// CUDA C++ (NVRTC) spelling of elementwise chains. The names it uses (the storage typedefs,
// to_f / from_f, the rlx_int_* and rlx_mod_floor helpers) come from the CUDA backend's kernel
// prelude (src/backends/cuda/kernels/prelude.h, cuda_types.h), so `Helpers` stays empty.
#include "codegen/language.h"
#include "rlx/error.h"

namespace rlx::codegen {
namespace {

bool is_unsigned(DType t) { return t == DType::U8 || t == DType::U32 || t == DType::Bool; }

class CudaFloat final : public ExprPrinter {
 public:
  explicit CudaFloat(DType t) : t_(t) {}
  std::string literal(double v) const override { return float_literal(v, t_, t_ == DType::F64 ? "" : "f"); }
  std::string call(MathFn f, const std::vector<std::string>& args) const override {
    static const char* names[] = {"exp",  "log",  "log1p", "tanh",  "erf",  "sqrt", "sin",  "cos", "tan",
                                  "atan", "asin", "acos",  "floor", "ceil", "rint", "fabs", "fmax"};
    return call_expr(std::string(names[static_cast<size_t>(f)]) + (t_ == DType::F64 ? "" : "f"), args);
  }
  std::string select(const std::string& c, const std::string& a, const std::string& b) const override {
    return "(" + c + " ? " + a + " : " + b + ")";
  }

 private:
  DType t_;
};

class Cuda final : public Language {
 public:
  LangId id() const override { return LangId::Cuda; }
  std::optional<DType> storage_dtype(DType t) const override {
    if (!gpu_dtype(t)) return std::nullopt;
    return t;
  }
  bool has_math(MathFn, DType t) const override { return t == DType::F32 || t == DType::F64; }

  std::string storage_type(DType t) const override {
    switch (t) {
      case DType::F32: return "float";
      case DType::F16: return "f16_t";
      case DType::BF16: return "bf16_t";
      case DType::F64: return "double";
      case DType::I8: return "i8_t";
      case DType::I16: return "i16_t";
      case DType::I32: return "i32_t";
      case DType::I64: return "i64_t";
      case DType::U8: return "u8_t";
      case DType::U32: return "u32_t";
      case DType::Bool: return "u8_t";
      default: break;  // not held (storage_dtype)
    }
    return "?";
  }
  std::string compute_type(DType t) const override {
    if (t == DType::F32 || t == DType::F16 || t == DType::BF16) return "float";
    return storage_type(t);
  }
  std::unique_ptr<ExprPrinter> float_printer(DType t, Helpers&) const override {
    return std::make_unique<CudaFloat>(t == DType::F64 ? DType::F64 : DType::F32);
  }
  std::string load(DType t, const std::string& raw) const override {
    return t == DType::F16 || t == DType::BF16 ? "to_f(" + raw + ")" : raw;
  }
  std::string store(DType t, const std::string& v) const override {
    if (t == DType::F32) return v;
    if (t == DType::F16 || t == DType::BF16) return "from_f<" + storage_type(t) + ">(" + v + ")";
    if (t == DType::Bool) return "(u8_t)((" + v + ") != 0)";
    return "(" + storage_type(t) + ")(" + v + ")";
  }
  std::string round(DType t, const std::string& v) const override {
    if (t == DType::F16 || t == DType::BF16) return "to_f(from_f<" + storage_type(t) + ">(" + v + "))";
    return v;
  }

  std::string binary(BinaryKind k, DType t, const std::string& a, const std::string& b, Helpers&,
                     bool* error_flag) const override {
    const std::string C = compute_type(t);
    if (t == DType::Bool) {
      switch (k) {
        case BinaryKind::And:
        case BinaryKind::Min: return "(u8_t)(" + a + " & " + b + ")";
        case BinaryKind::Or:
        case BinaryKind::Max: return "(u8_t)(" + a + " | " + b + ")";
        case BinaryKind::Xor: return "(u8_t)(" + a + " ^ " + b + ")";
        default: break;
      }
    } else if (is_float(t)) {
      if (std::string e = float_arith(k, a, b); !e.empty()) return e;
      switch (k) {
        case BinaryKind::Max: return "((" + a + " > " + b + " || " + a + " != " + a + ") ? " + a + " : " + b + ")";
        case BinaryKind::Min: return "((" + a + " < " + b + " || " + a + " != " + a + ") ? " + a + " : " + b + ")";
        case BinaryKind::Pow: return (t == DType::F64 ? "pow(" : "powf(") + a + ", " + b + ")";
        case BinaryKind::Mod: return "rlx_mod_floor(" + a + ", " + b + ")";
        case BinaryKind::FMod: return (t == DType::F64 ? "fmod(" : "fmodf(") + a + ", " + b + ")";
        default: break;
      }
    } else {
      const std::string W = "(unsigned long long)";
      // Zero divisors (and 0 to a negative power) set the run's error flag (the CPU's errors).
      if (const char* fn = int_checked_helper(k)) {
        if (error_flag) *error_flag = true;
        return std::string(fn) + "<" + C + ">(" + a + ", " + b + ", err)";
      }
      switch (k) {
        case BinaryKind::Add: return "(" + C + ")(" + W + a + " + " + W + b + ")";
        case BinaryKind::Sub: return "(" + C + ")(" + W + a + " - " + W + b + ")";
        case BinaryKind::Mul: return "(" + C + ")(" + W + a + " * " + W + b + ")";
        case BinaryKind::Max: return "(" + a + " > " + b + " ? " + a + " : " + b + ")";
        case BinaryKind::Min: return "(" + a + " < " + b + " ? " + a + " : " + b + ")";
        case BinaryKind::And: return "(" + C + ")(" + a + " & " + b + ")";
        case BinaryKind::Or: return "(" + C + ")(" + a + " | " + b + ")";
        case BinaryKind::Xor: return "(" + C + ")(" + a + " ^ " + b + ")";
        case BinaryKind::Shl:
        case BinaryKind::Shr:  // unsigned (the IR's rule); the bit width or more shifts everything out
          return "(" + b + " >= " + std::to_string(8 * dtype_size(t)) + " ? (" + C + ")0 : (" + C + ")(" + a +
                 (k == BinaryKind::Shl ? " << " : " >> ") + b + "))";
        default: break;
      }
    }
    throw Error(std::string("CUDA elementwise: binary ") + enum_name(k) + " is not supported for " + dtype_name(t));
  }

  std::string compare(CompareKind k, DType, const std::string& a, const std::string& b) const override {
    return "(u8_t)" + infix(a, compare_op(k), b);
  }

  std::string activation(ActKind k, DType t, const std::string& x, Helpers& h) const override {
    if (t == DType::Bool) {
      if (k == ActKind::Not) return "(u8_t)(" + x + " == 0)";
    } else if (is_float(t)) {
      if (has_float_formula(k)) return print_activation(k, *float_printer(t, h), x);
    } else {
      const std::string C = compute_type(t);
      const std::string neg = "(" + C + ")(0ull - (unsigned long long)" + x + ")";
      switch (k) {
        case ActKind::Neg: return neg;
        case ActKind::Abs: return is_unsigned(t) ? x : "(" + x + " < 0 ? " + neg + " : " + x + ")";
        case ActKind::Relu: return is_unsigned(t) ? x : "(" + x + " < 0 ? (" + C + ")0 : " + x + ")";
        case ActKind::Sign:
          return is_unsigned(t) ? "(" + C + ")(" + x + " > 0)" : "(" + C + ")((" + x + " > 0) - (" + x + " < 0))";
        case ActKind::Not: return "(" + C + ")(~" + x + ")";
        default: break;
      }
    }
    throw Error(std::string("CUDA elementwise: activation ") + enum_name(k) + " is not supported for " + dtype_name(t));
  }

  std::string cast(DType to, DType, const std::string& x) const override {
    if (to == DType::Bool) return "(u8_t)(" + x + " != 0)";
    return "(" + compute_type(to) + ")(" + x + ")";
  }
  std::string where(const std::string& c, const std::string& a, const std::string& b) const override {
    return "(" + c + " ? " + a + " : " + b + ")";
  }
};

}  // namespace

const Language& cuda_language() {
  static const Cuda l;
  return l;
}

}  // namespace rlx::codegen
