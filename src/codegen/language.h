#pragma once
// A kernel language (CUDA C++, GLSL 4.5 for Vulkan compute, WGSL for WebGPU): what it can
// express (its capability table) and how it spells the values of an elementwise chain.
//
// Every value of a chain has a logical dtype (the graph's). A language holds each logical dtype
// in buffers as a storage dtype (`storage_dtype`: WGSL has no 8/16-bit or 64-bit types, so bool
// and u8 live in 32-bit words) and computes in a compute type (floats in f32, f64 in double,
// integers in their own width, bool as the language's truth type). The expression methods below
// take and return compute-typed expressions; `load`/`store` convert at the buffer.
//
// Helper functions a spelling needs (erf where the language has none, the integer division
// family with its error reporting) are added to `Helpers` by name and emitted once per kernel
// by the kernel printer (`helper_source`).
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "codegen/formula.h"
#include "rlx/dtype.h"
#include "rlx/ops.h"

namespace rlx::codegen {

enum class LangId { Cuda, Glsl, Wgsl };
const char* lang_name(LangId l);

// Helper functions a kernel needs: name -> source (emitted in insertion order of first use).
struct Helpers {
  std::vector<std::pair<std::string, std::string>> items;
  void add(const std::string& name, const std::string& source);
  bool has(const std::string& name) const;
  std::string source() const;
};

// Error codes kernels of every GPU backend write to the run's error flag (first writer wins).
inline constexpr int kErrGatherIndex = 1;      // gather: an index outside [-n, n)
inline constexpr int kErrScatterIndex = 2;     // scatter_add: an index outside [-n, n)
inline constexpr int kErrExpertIndex = 3;      // grouped_matmul: an expert index outside [0, E)
inline constexpr int kErrSampleNaN = 4;        // sample: a NaN logit
inline constexpr int kErrSampleAllNegInf = 5;  // sample: every logit of a row is -inf
inline constexpr int kErrIntDivZero = 6;       // an integer Div/Mod/FMod divisor is 0
inline constexpr int kErrIntPowZero = 7;       // an integer 0 raised to a negative power
inline constexpr int kErrNarrowOverflow = 8;   // an i64 result beyond the 32-bit words a device holds i64 in (WGSL)
inline constexpr int kErrCachePosition = 9;    // cache_write: a position outside [0, cache rows)
// The rlx::Error text of a code on device `device` ("" for an unknown code).
std::string kernel_error_message(int code, const std::string& device);

class Language {
 public:
  virtual ~Language() = default;
  virtual LangId id() const = 0;
  const char* name() const { return lang_name(id()); }

  // ---- capability table ----
  // The dtype a tensor of logical dtype `t` is held as in buffers, or nullopt when the language
  // cannot hold it (the backend then rejects the op with this reason).
  virtual std::optional<DType> storage_dtype(DType t) const = 0;
  // Whether the elementwise path computes logical dtype `t` (held as storage_dtype(t)).
  virtual bool computes(DType t) const { return storage_dtype(t).has_value(); }
  // Whether math function `f` is available (natively or as an emitted helper) in float compute
  // dtype `t` (F32 or F64).
  virtual bool has_math(MathFn f, DType t) const = 0;
  // Why logical dtype `t` cannot be held ("" when it can).
  std::string storage_gap(DType t) const;
  // The dtypes no GPU language holds: u16, u64 and the storage-only dtypes (float8, float4,
  // int4/uint4, int2/uint2), which rlx runs on the CPU.
  static bool gpu_dtype(DType t) { return !is_storage_only(t) && t != DType::U16 && t != DType::U64; }

  // ---- spelling ----
  virtual std::string storage_type(DType stored) const = 0;  // element type of a buffer
  virtual std::string compute_type(DType t) const = 0;       // type of a chain value of logical dtype t
  // The printer of float formulas in the compute type of float dtype `t`.
  virtual std::unique_ptr<ExprPrinter> float_printer(DType t, Helpers& h) const = 0;
  // Buffer element `raw` (of storage_dtype(t)) -> compute value, and back.
  virtual std::string load(DType t, const std::string& raw) const = 0;
  virtual std::string store(DType t, const std::string& v) const = 0;
  // Adds the helpers that load/store/round of logical dtype `t` use (e.g. bf16 rounding).
  virtual void dtype_helpers(DType t, Helpers& h) const { (void)t, (void)h; }
  // A freshly computed value of dtype t rounded to t's precision (f16/bf16 are computed in f32).
  virtual std::string round(DType t, const std::string& v) const = 0;
  // The chain's operations on compute values; rlx::Error when the language has no spelling.
  // `error_flag` is set when the spelling reports errors through the run's flag.
  virtual std::string binary(BinaryKind k, DType t, const std::string& a, const std::string& b, Helpers& h,
                             bool* error_flag) const = 0;
  virtual std::string compare(CompareKind k, DType t, const std::string& a, const std::string& b) const = 0;
  virtual std::string activation(ActKind k, DType t, const std::string& x, Helpers& h) const = 0;
  virtual std::string cast(DType to, DType from, const std::string& x) const = 0;
  // cond (a bool compute value) ? a : b.
  virtual std::string where(const std::string& cond, const std::string& a, const std::string& b) const = 0;

 protected:
  // Spellings every language shares.
  static std::string infix(const std::string& a, const char* op, const std::string& b) {
    return "(" + a + " " + op + " " + b + ")";
  }
  static const char* compare_op(CompareKind k);
  // "(a + b)" ... for the four float arithmetic kinds; "" for the others.
  static std::string float_arith(BinaryKind k, const std::string& a, const std::string& b);
  // Bool And/Or/Xor (Max = Or, Min = And) where the truth type has && and ||; "" for the others.
  static std::string logical(BinaryKind k, const std::string& a, const std::string& b);
  // The helper of an integer Div/Mod/FMod/Pow ("rlx_int_div", ...), which reports a zero divisor
  // (or 0 to a negative power) through the run's error flag; nullptr for the other kinds.
  static const char* int_checked_helper(BinaryKind k);
};

const Language& cuda_language();
const Language& glsl_language();
const Language& wgsl_language();
const Language& language(LangId id);

// `fn(a, b, ...)`.
std::string call_expr(const std::string& fn, const std::vector<std::string>& args);
// `s` with every `from` replaced by `to` (fills the type placeholders of helper sources).
std::string replace_all(std::string s, const std::string& from, const std::string& to);

// A float literal spelled with enough digits to round-trip in dtype `t` (F32: 9, F64: 17) and
// always with a '.' or an exponent; `suffix` is appended (e.g. "f").
std::string float_literal(double v, DType t, const std::string& suffix = "");

}  // namespace rlx::codegen
