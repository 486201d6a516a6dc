#include "backends/cuda/elementwise_codegen.h"

#include <algorithm>
#include <sstream>

#include "backends/cuda/cuda_types.h"
#include "rlx/error.h"

namespace rlx::cuda {
namespace {

// The compute type of a value of dtype `t` inside a chain: floats compute in f32.
std::string compute_type(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: return "float";
    default: return storage_type(t);
  }
}

std::string load_expr(DType t, const std::string& e) {
  if (t == DType::F32) return e;
  if (t == DType::F16 || t == DType::BF16) return "to_f(" + e + ")";
  return e;
}

// Rounds a freshly computed value to its dtype (f16/bf16 values are held in f32).
std::string round_expr(DType t, const std::string& e) {
  if (t == DType::F16 || t == DType::BF16) return "to_f(from_f<" + storage_type(t) + ">(" + e + "))";
  return e;
}

std::string store_expr(DType t, const std::string& e) {
  if (t == DType::F32) return e;
  if (t == DType::F16 || t == DType::BF16) return "from_f<" + storage_type(t) + ">(" + e + ")";
  if (t == DType::Bool) return "(u8_t)((" + e + ") != 0)";
  return "(" + storage_type(t) + ")(" + e + ")";
}

bool is_unsigned(DType t) { return t == DType::U8 || t == DType::U32 || t == DType::Bool; }

// The CUDA math function `name` (double version) for a float dtype's compute type: f64 computes
// in double, the others in f32 (`expf`, ...).
std::string fn(DType t, const char* name) { return t == DType::F64 ? std::string(name) : std::string(name) + "f"; }
// A floating literal in the compute type of `t` (an f32 literal would round f64 constants).
std::string lit(DType t, const char* v) { return t == DType::F64 ? std::string(v) : std::string(v) + "f"; }

std::string binary_expr(BinaryKind k, DType t, const std::string& a, const std::string& b) {
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
    switch (k) {
      case BinaryKind::Add: return "(" + a + " + " + b + ")";
      case BinaryKind::Sub: return "(" + a + " - " + b + ")";
      case BinaryKind::Mul: return "(" + a + " * " + b + ")";
      case BinaryKind::Div: return "(" + a + " / " + b + ")";
      case BinaryKind::Max: return "((" + a + " > " + b + " || " + a + " != " + a + ") ? " + a + " : " + b + ")";
      case BinaryKind::Min: return "((" + a + " < " + b + " || " + a + " != " + a + ") ? " + a + " : " + b + ")";
      case BinaryKind::Pow: return fn(t, "pow") + "(" + a + ", " + b + ")";
      case BinaryKind::Mod: return "rlx_mod_floor(" + a + ", " + b + ")";
      case BinaryKind::FMod: return fn(t, "fmod") + "(" + a + ", " + b + ")";
      default: break;
    }
  } else {
    const std::string W = "(unsigned long long)";
    switch (k) {
      case BinaryKind::Add: return "(" + C + ")(" + W + a + " + " + W + b + ")";
      case BinaryKind::Sub: return "(" + C + ")(" + W + a + " - " + W + b + ")";
      case BinaryKind::Mul: return "(" + C + ")(" + W + a + " * " + W + b + ")";
      case BinaryKind::Max: return "(" + a + " > " + b + " ? " + a + " : " + b + ")";
      case BinaryKind::Min: return "(" + a + " < " + b + " ? " + a + " : " + b + ")";
      // Zero divisors (and 0 to a negative power) set the run's error flag (the CPU's errors).
      case BinaryKind::Div: return "rlx_int_div<" + C + ">(" + a + ", " + b + ", err)";
      case BinaryKind::Mod: return "rlx_int_mod<" + C + ">(" + a + ", " + b + ", err)";
      case BinaryKind::FMod: return "rlx_int_fmod<" + C + ">(" + a + ", " + b + ", err)";
      case BinaryKind::Pow: return "rlx_int_pow<" + C + ">(" + a + ", " + b + ", err)";
      default: break;
    }
  }
  throw Error(std::string("CUDA elementwise: binary ") + enum_name(k) + " is not supported for " + dtype_name(t));
}

std::string compare_expr(CompareKind k, const std::string& a, const std::string& b) {
  static const char* ops[] = {"==", "!=", "<", "<=", ">", ">="};
  return "(u8_t)(" + a + " " + ops[static_cast<int>(k)] + " " + b + ")";
}

std::string act_expr(ActKind k, DType t, const std::string& x) {
  if (t == DType::Bool) {
    if (k == ActKind::Not) return "(u8_t)(" + x + " == 0)";
  } else if (is_float(t)) {
    auto f = [&](const char* name) { return fn(t, name) + "(" + x + ")"; };
    auto c = [&](const char* v) { return lit(t, v); };
    switch (k) {
      case ActKind::Gelu: return "(" + c("0.5") + " * " + x + " * (" + c("1.") + " + " + fn(t, "erf") + "(" + x + " * " + c("0.70710678118654752") + ")))";
      case ActKind::GeluApprox:
        return "(" + c("0.5") + " * " + x + " * (" + c("1.") + " + " + fn(t, "tanh") + "(" + c("0.79788456080286536") + " * (" + x +
               " + " + c("0.044715") + " * " + x + " * " + x + " * " + x + "))))";
      case ActKind::Silu: return "(" + x + " / (" + c("1.") + " + " + fn(t, "exp") + "(-" + x + ")))";
      case ActKind::Relu: return "(" + x + " < " + c("0.") + " ? " + c("0.") + " : " + x + ")";
      case ActKind::Sigmoid: return "(" + c("1.") + " / (" + c("1.") + " + " + fn(t, "exp") + "(-" + x + ")))";
      case ActKind::Tanh: return f("tanh");
      case ActKind::Exp: return f("exp");
      case ActKind::Log: return f("log");
      case ActKind::Sqrt: return f("sqrt");
      case ActKind::Rsqrt: return "(" + c("1.") + " / " + f("sqrt") + ")";
      case ActKind::Neg: return "(-" + x + ")";
      case ActKind::Abs: return f("fabs");
      case ActKind::Sin: return f("sin");
      case ActKind::Cos: return f("cos");
      case ActKind::Tan: return f("tan");
      case ActKind::Atan: return f("atan");
      case ActKind::Round: return f("rint");
      case ActKind::Erf: return f("erf");
      case ActKind::Floor: return f("floor");
      case ActKind::Ceil: return f("ceil");
      case ActKind::Reciprocal: return "(" + c("1.") + " / " + x + ")";
      case ActKind::Sign: return "(" + x + " > " + c("0.") + " ? " + c("1.") + " : (" + x + " < " + c("0.") + " ? " + c("-1.") + " : " + x + "))";
      case ActKind::Softplus:
        return "(" + fn(t, "fmax") + "(" + x + ", " + c("0.") + ") + " + fn(t, "log1p") + "(" + fn(t, "exp") + "(-" + fn(t, "fabs") + "(" + x + "))))";
      case ActKind::Asin: return f("asin");
      case ActKind::Acos: return f("acos");
      case ActKind::Not: break;
    }
  } else {
    const std::string C = compute_type(t);
    const std::string neg = "(" + C + ")(0ull - (unsigned long long)" + x + ")";
    switch (k) {
      case ActKind::Neg: return neg;
      case ActKind::Abs: return is_unsigned(t) ? x : "(" + x + " < 0 ? " + neg + " : " + x + ")";
      case ActKind::Relu: return is_unsigned(t) ? x : "(" + x + " < 0 ? (" + C + ")0 : " + x + ")";
      case ActKind::Sign:
        return is_unsigned(t) ? "(" + C + ")(" + x + " > 0)" : "(" + C + ")((" + x + " > 0) - (" + x + " < 0))";
      default: break;
    }
  }
  throw Error(std::string("CUDA elementwise: activation ") + enum_name(k) + " is not supported for " + dtype_name(t));
}

std::string cast_expr(DType to, const std::string& x) {
  if (to == DType::Bool) return "(u8_t)(" + x + " != 0)";
  return "(" + compute_type(to) + ")(" + x + ")";
}

// Result dtype of every step (validates arg references).
std::vector<DType> step_dtypes(const std::vector<RegionStep>& steps, const std::vector<DType>& in) {
  std::vector<DType> out;
  auto arg_dtype = [&](int32_t a) -> DType {
    if (a >= 0) {
      if (static_cast<size_t>(a) >= in.size()) throw Error("CUDA elementwise: region step reads a missing input");
      return in[static_cast<size_t>(a)];
    }
    const size_t s = static_cast<size_t>(-a - 1);
    if (s >= out.size()) throw Error("CUDA elementwise: region step reads a later step");
    return out[s];
  };
  for (const auto& st : steps) {
    switch (st.kind) {
      case RegionStepKind::Binary:
      case RegionStepKind::Activation: out.push_back(arg_dtype(st.args.at(0))); break;
      case RegionStepKind::Compare: out.push_back(DType::Bool); break;
      case RegionStepKind::Cast: out.push_back(st.to); break;
      case RegionStepKind::Where: out.push_back(arg_dtype(st.args.at(1))); break;
    }
  }
  return out;
}

}  // namespace

std::vector<RegionStep> single_step_chain(const Op& op) {
  RegionStep s;
  if (auto* b = std::get_if<ops::Binary>(&op)) s = {RegionStepKind::Binary, static_cast<int32_t>(b->kind), DType::F32, {0, 1}};
  else if (auto* c = std::get_if<ops::Compare>(&op)) s = {RegionStepKind::Compare, static_cast<int32_t>(c->kind), DType::F32, {0, 1}};
  else if (auto* a = std::get_if<ops::Activation>(&op)) s = {RegionStepKind::Activation, static_cast<int32_t>(a->kind), DType::F32, {0}};
  else if (auto* k = std::get_if<ops::Cast>(&op)) s = {RegionStepKind::Cast, 0, k->to, {0}};
  else if (std::holds_alternative<ops::Where>(op)) s = {RegionStepKind::Where, 0, DType::F32, {0, 1, 2}};
  else if (auto* r = std::get_if<ops::ElementwiseRegion>(&op)) return r->steps;
  else throw Error(std::string("CUDA elementwise: '") + op_name(op) + "' is not an elementwise op");
  return {s};
}

bool elementwise_supported(const std::vector<RegionStep>& steps, const std::vector<DType>& in_dtypes, std::string* why) {
  try {
    const auto dts = step_dtypes(steps, in_dtypes);
    for (size_t i = 0; i < steps.size(); ++i) {
      const auto& st = steps[i];
      const DType a0 = st.args.empty() ? DType::F32
                                       : (st.args[0] >= 0 ? in_dtypes.at(static_cast<size_t>(st.args[0]))
                                                          : dts.at(static_cast<size_t>(-st.args[0] - 1)));
      if (st.kind == RegionStepKind::Binary) binary_expr(static_cast<BinaryKind>(st.op), a0, "a", "b");
      if (st.kind == RegionStepKind::Activation) act_expr(static_cast<ActKind>(st.op), a0, "x");
    }
    return true;
  } catch (const Error& e) {
    if (why) *why = e.what();
    return false;
  }
}

ElementwiseKernel make_elementwise_kernel(const std::vector<RegionStep>& steps, const std::vector<DType>& in_dtypes,
                                          DType out_dtype, const plan::ElementwiseGeom& geom, int max_vec,
                                          int64_t early_max_items) {
  const auto dts = step_dtypes(steps, in_dtypes);
  if (dts.empty() || dts.back() != out_dtype) throw Error("CUDA elementwise: the chain's result dtype is not the output's");
  const size_t n_in = in_dtypes.size();
  const int64_t rank = static_cast<int64_t>(geom.out_dims.size());
  // Vector path: every input is either the output's contiguous layout or a single element.
  std::vector<int> kind(n_in);  // 0 = contiguous, 1 = scalar, 2 = strided
  const auto contig = contiguous_strides(geom.out_dims);
  bool vector_ok = true;
  for (size_t k = 0; k < n_in; ++k) {
    const auto& s = geom.in_strides.at(k);
    if (s == contig) kind[k] = 0;
    else if (std::all_of(s.begin(), s.end(), [](int64_t v) { return v == 0; })) kind[k] = 1;
    else { kind[k] = 2; vector_ok = false; }
  }
  size_t widest = dtype_size(out_dtype);
  for (DType t : in_dtypes) widest = std::max(widest, dtype_size(t));
  int vec = 1;
  if (vector_ok) {
    vec = std::min<int>(max_vec, static_cast<int>(16 / widest));
    while (vec > 1 && geom.numel % vec != 0) vec /= 2;
    vec = std::max(vec, 1);
  }
  bool wide = geom.numel >= (int64_t(1) << 31);
  for (size_t k = 0; k < n_in; ++k)
    for (int64_t d = 0; d < rank; ++d)
      if (geom.in_strides[k][static_cast<size_t>(d)] * geom.out_dims[static_cast<size_t>(d)] >= (int64_t(1) << 31))
        wide = true;
  const std::string I = wide ? "unsigned long long" : "unsigned int";

  // Integer Div/Mod/FMod/Pow report zero divisors through the run's error flag.
  bool error_flag = false;
  for (size_t s = 0; s < steps.size(); ++s) {
    const auto& st = steps[s];
    if (st.kind != RegionStepKind::Binary) continue;
    const auto k = static_cast<BinaryKind>(st.op);
    const DType a0 = st.args[0] >= 0 ? in_dtypes.at(static_cast<size_t>(st.args[0])) : dts.at(static_cast<size_t>(-st.args[0] - 1));
    if (!is_float(a0) && a0 != DType::Bool &&
        (k == BinaryKind::Div || k == BinaryKind::Mod || k == BinaryKind::FMod || k == BinaryKind::Pow))
      error_flag = true;
  }

  std::ostringstream body;
  body << "extern \"C\" __global__ void rlx_elementwise(" << storage_type(out_dtype) << "* out";
  for (size_t k = 0; k < n_in; ++k) body << ", const " << storage_type(in_dtypes[k]) << "* in" << k;
  if (error_flag) body << ", int* err";
  body << ") {\n";
  const int64_t items = geom.numel / vec;
  const bool early_dependents = items <= early_max_items;
  body << (early_dependents ? "  rlx_pdl_begin_after_dependents();\n" : "  rlx_pdl_begin();\n");
  body << "  const " << I << " items = " << items << "ull;\n";
  body << "  for (" << I << " i = blockIdx.x * (" << I << ")blockDim.x + threadIdx.x; i < items; i += (" << I
       << ")gridDim.x * blockDim.x) {\n";
  if (vector_ok) {
    for (size_t k = 0; k < n_in; ++k) {
      const std::string T = storage_type(in_dtypes[k]);
      if (kind[k] == 0)
        body << "    const Vec<" << T << ", " << vec << "> a" << k << " = *(const Vec<" << T << ", " << vec
             << ">*)(in" << k << " + (" << I << ")i * " << vec << ");\n";
      else
        body << "    const " << T << " s" << k << " = in" << k << "[0];\n";
    }
    body << "    Vec<" << storage_type(out_dtype) << ", " << vec << "> o;\n";
    body << "#pragma unroll\n    for (int e = 0; e < " << vec << "; ++e) {\n";
  } else {
    // Unravel the output index (innermost dim first) into each input's element offset.
    for (size_t k = 0; k < n_in; ++k) body << "    " << I << " off" << k << " = 0;\n";
    body << "    " << I << " t = i;\n";
    for (int64_t d = rank - 1; d >= 0; --d) {
      const int64_t dim = geom.out_dims[static_cast<size_t>(d)];
      body << "    { const " << I << " c = " << (d == 0 ? std::string("t") : "t % " + std::to_string(dim) + "u");
      body << ";" << (d == 0 ? "" : " t /= " + std::to_string(dim) + "u;");
      for (size_t k = 0; k < n_in; ++k) {
        const int64_t s = geom.in_strides[k][static_cast<size_t>(d)];
        if (s != 0) body << " off" << k << " += c * " << s << "u;";
      }
      body << " }\n";
    }
    body << "    {\n";
  }
  for (size_t k = 0; k < n_in; ++k) {
    std::string src;
    if (!vector_ok) src = "in" + std::to_string(k) + "[off" + std::to_string(k) + "]";
    else if (kind[k] == 0) src = "a" + std::to_string(k) + ".v[e]";
    else src = "s" + std::to_string(k);
    body << "      const " << compute_type(in_dtypes[k]) << " x" << k << " = " << load_expr(in_dtypes[k], src) << ";\n";
  }
  auto ref = [](int32_t a) { return a >= 0 ? "x" + std::to_string(a) : "v" + std::to_string(-a - 1); };
  auto ref_dtype = [&](int32_t a) { return a >= 0 ? in_dtypes[static_cast<size_t>(a)] : dts[static_cast<size_t>(-a - 1)]; };
  for (size_t s = 0; s < steps.size(); ++s) {
    const auto& st = steps[s];
    std::string e;
    switch (st.kind) {
      case RegionStepKind::Binary:
        e = binary_expr(static_cast<BinaryKind>(st.op), ref_dtype(st.args[0]), ref(st.args[0]), ref(st.args[1]));
        break;
      case RegionStepKind::Compare:
        e = compare_expr(static_cast<CompareKind>(st.op), ref(st.args[0]), ref(st.args[1]));
        break;
      case RegionStepKind::Activation:
        e = act_expr(static_cast<ActKind>(st.op), ref_dtype(st.args[0]), ref(st.args[0]));
        break;
      case RegionStepKind::Cast: e = cast_expr(st.to, ref(st.args[0])); break;
      case RegionStepKind::Where:
        e = "(" + ref(st.args[0]) + " ? " + ref(st.args[1]) + " : " + ref(st.args[2]) + ")";
        break;
    }
    body << "      const " << compute_type(dts[s]) << " v" << s << " = " << round_expr(dts[s], e) << ";\n";
  }
  const std::string result = "v" + std::to_string(steps.size() - 1);
  if (vector_ok) {
    body << "      o.v[e] = " << store_expr(out_dtype, result) << ";\n    }\n";
    body << "    *(Vec<" << storage_type(out_dtype) << ", " << vec << ">*)(out + (" << I << ")i * " << vec << ") = o;\n";
  } else {
    body << "      out[i] = " << store_expr(out_dtype, result) << ";\n    }\n";
  }
  body << "  }\n}\n";

  ElementwiseKernel k;
  k.entry = "rlx_elementwise";
  k.source = std::string(kernel_prelude()) + "#define RLX_ERR_INT_DIV_ZERO " + std::to_string(kErrIntDivZero) +
             "\n#define RLX_ERR_INT_POW_ZERO " + std::to_string(kErrIntPowZero) + "\n" + kElementwiseHelpers + body.str();
  k.error_flag = error_flag;
  k.vec = vec;
  k.items = items;
  k.early_dependents = early_dependents;
  return k;
}

std::string float_activation_expr(ActKind k, const std::string& x) { return act_expr(k, DType::F32, x); }

std::string elementwise_error_message(int code) {
  if (code == kErrIntDivZero)
    return "integer division by zero on CUDA: a Div, Mod or FMod divisor has a 0 (the CPU backend names the element; "
           "guard the divisor, e.g. Where(b == 0, 1, b))";
  if (code == kErrIntPowZero) return "integer pow on CUDA: 0 raised to a negative power has no integer value";
  return "";
}

}  // namespace rlx::cuda
