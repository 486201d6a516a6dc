#include "codegen/language.h"

#include <cmath>
#include <cstdio>

#include "rlx/error.h"

namespace rlx::codegen {

const char* lang_name(LangId l) {
  switch (l) {
    case LangId::Cuda: return "CUDA";
    case LangId::Glsl: return "GLSL";
    case LangId::Wgsl: return "WGSL";
  }
  return "?";
}

void Helpers::add(const std::string& name, const std::string& source) {
  if (!has(name)) items.emplace_back(name, source);
}

bool Helpers::has(const std::string& name) const {
  for (const auto& [n, s] : items)
    if (n == name) return true;
  return false;
}

std::string Helpers::source() const {
  std::string s;
  for (const auto& [n, src] : items) s += src;
  return s;
}

std::string kernel_error_message(int code, const std::string& device) {
  switch (code) {
    case kErrGatherIndex:
      return "gather on " + device + ": an index is out of range of the gathered axis (indices must be in [-n, n))";
    case kErrScatterIndex:
      return "scatter_add on " + device + ": an index is out of range of the scattered axis (indices must be in [-n, n))";
    case kErrExpertIndex:
      return "grouped_matmul on " + device + ": an expert index is out of range (indices must be in [0, experts))";
    case kErrSampleNaN: return "sample on " + device + ": a logits row has NaN; check the model's logits";
    case kErrSampleAllNegInf: return "sample on " + device + ": every logit of a row is -inf; nothing can be sampled";
    case kErrCachePosition:
      return "cache_write on " + device + ": a position is outside the cache's rows (positions must be in [0, rows); "
             "a longer sequence needs a larger cache)";
    default: break;
  }
  if (code == kErrIntDivZero)
    return "integer division by zero on " + device +
           ": a Div, Mod or FMod divisor has a 0 (the CPU backend names the element; guard the divisor, e.g. "
           "Where(b == 0, 1, b))";
  if (code == kErrIntPowZero) return "integer pow on " + device + ": 0 raised to a negative power has no integer value";
  if (code == kErrNarrowOverflow)
    return "i64 arithmetic on " + device + ": a result is outside [-2^31, 2^31), and " + device +
           " holds i64 values in 32-bit words (run the graph on the CPU, CUDA or Vulkan for 64-bit integers)";
  return "";
}

std::string Language::storage_gap(DType t) const {
  if (storage_dtype(t)) return "";
  std::string why = std::string(name()) + " kernels cannot hold " + dtype_name(t) + " tensors";
  if (!gpu_dtype(t))
    why += std::string(" (") + (is_storage_only(t) ? "a storage-only dtype" : "no GPU kernels for it") +
           "; rlx runs " + dtype_name(t) + " on the CPU)";
  return why;
}

const char* Language::compare_op(CompareKind k) {
  static const char* ops[] = {"==", "!=", "<", "<=", ">", ">="};
  return ops[static_cast<size_t>(k)];
}

std::string Language::float_arith(BinaryKind k, const std::string& a, const std::string& b) {
  switch (k) {
    case BinaryKind::Add: return infix(a, "+", b);
    case BinaryKind::Sub: return infix(a, "-", b);
    case BinaryKind::Mul: return infix(a, "*", b);
    case BinaryKind::Div: return infix(a, "/", b);
    default: return "";
  }
}

std::string Language::logical(BinaryKind k, const std::string& a, const std::string& b) {
  switch (k) {
    case BinaryKind::And:
    case BinaryKind::Min: return infix(a, "&&", b);
    case BinaryKind::Or:
    case BinaryKind::Max: return infix(a, "||", b);
    case BinaryKind::Xor: return infix(a, "!=", b);
    default: return "";
  }
}

const char* Language::int_checked_helper(BinaryKind k) {
  switch (k) {
    case BinaryKind::Div: return "rlx_int_div";
    case BinaryKind::Mod: return "rlx_int_mod";
    case BinaryKind::FMod: return "rlx_int_fmod";
    case BinaryKind::Pow: return "rlx_int_pow";
    default: return nullptr;
  }
}

const Language& language(LangId id) {
  switch (id) {
    case LangId::Cuda: return cuda_language();
    case LangId::Glsl: return glsl_language();
    case LangId::Wgsl: return wgsl_language();
  }
  throw Error("codegen: unknown language id " + std::to_string(static_cast<int>(id)));
}

std::string call_expr(const std::string& fn, const std::vector<std::string>& args) {
  std::string s = fn + "(";
  for (size_t i = 0; i < args.size(); ++i) s += (i ? ", " : "") + args[i];
  return s + ")";
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

std::string float_literal(double v, DType t, const std::string& suffix) {
  if (!std::isfinite(v)) throw Error("codegen: a non-finite float literal cannot be spelled");
  char buf[40];
  if (t == DType::F64) std::snprintf(buf, sizeof buf, "%.17g", v);
  else std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(static_cast<float>(v)));
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s + suffix;
}

}  // namespace rlx::codegen
