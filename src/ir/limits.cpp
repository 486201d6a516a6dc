#include "rlx/limits.h"

#include <limits>

#include "rlx/error.h"
#include "rlx/shape.h"

namespace rlx {
namespace {

Limits& process_defaults() {
  static Limits defaults;
  return defaults;
}
thread_local const Limits* scoped = nullptr;

std::string raise_hint(const char* field) {
  return " (rlx::Limits::" + std::string(field) +
         "; raise it through CompileOptions::limits or OnnxImportOptions::limits if this size is intended)";
}

}  // namespace

void Limits::validate() const {
  check(max_tensor_bytes > 0, "Limits::max_tensor_bytes must be positive, got " + std::to_string(max_tensor_bytes));
  check(max_tensor_elements > 0,
        "Limits::max_tensor_elements must be positive, got " + std::to_string(max_tensor_elements));
  check(max_nesting_depth > 0, "Limits::max_nesting_depth must be positive, got " + std::to_string(max_nesting_depth));
  check(max_loop_iterations > 0,
        "Limits::max_loop_iterations must be positive, got " + std::to_string(max_loop_iterations));
  check(max_unroll_steps > 0, "Limits::max_unroll_steps must be positive, got " + std::to_string(max_unroll_steps));
}

const Limits& active_limits() { return scoped ? *scoped : process_defaults(); }

void set_default_limits(const Limits& limits) {
  limits.validate();
  process_defaults() = limits;
}

ScopedLimits::ScopedLimits(const Limits& limits) : limits_(limits), previous_(scoped) {
  limits_.validate();
  scoped = &limits_;
}
ScopedLimits::~ScopedLimits() { scoped = previous_; }

int64_t checked_mul(int64_t a, int64_t b, const std::string& what) {
  if (a < 0 || b < 0) throw Error(what + ": negative size in " + std::to_string(a) + " x " + std::to_string(b));
  if (a != 0 && b > std::numeric_limits<int64_t>::max() / a)
    throw Error(what + ": " + std::to_string(a) + " x " + std::to_string(b) + " overflows a 64-bit size");
  return a * b;
}

int64_t checked_add(int64_t a, int64_t b, const std::string& what) {
  if (a < 0 || b < 0) throw Error(what + ": negative size in " + std::to_string(a) + " + " + std::to_string(b));
  if (b > std::numeric_limits<int64_t>::max() - a)
    throw Error(what + ": " + std::to_string(a) + " + " + std::to_string(b) + " overflows a 64-bit size");
  return a + b;
}

int64_t checked_numel(const std::vector<int64_t>& dims, const std::string& what) {
  bool empty = false;
  for (int64_t d : dims) {
    if (d < 0) throw Error(what + ": shape " + dims_str(dims) + " has a negative dim");
    empty = empty || d == 0;
  }
  if (empty) return 0;
  int64_t n = 1;
  for (int64_t d : dims) {
    if (n > std::numeric_limits<int64_t>::max() / d)
      throw Error(what + ": shape " + dims_str(dims) + " has more elements than a 64-bit count holds");
    n *= d;
  }
  const int64_t cap = active_limits().max_tensor_elements;
  if (n > cap)
    throw Error(what + ": shape " + dims_str(dims) + " has " + std::to_string(n) + " elements, more than the limit of " +
                std::to_string(cap) + raise_hint("max_tensor_elements"));
  return n;
}

int64_t checked_nbytes(const std::vector<int64_t>& dims, DType dtype, const std::string& what) {
  const int64_t n = checked_numel(dims, what);
  const auto size = static_cast<int64_t>(dtype_size(dtype));
  if (n != 0 && size > std::numeric_limits<int64_t>::max() / n)
    throw Error(what + ": " + dtype_name(dtype) + dims_str(dims) + " has more bytes than a 64-bit count holds");
  const int64_t bytes = n * size;
  const int64_t cap = active_limits().max_tensor_bytes;
  if (bytes > cap)
    throw Error(what + ": " + dtype_name(dtype) + dims_str(dims) + " needs " + std::to_string(bytes) +
                " bytes, more than the limit of " + std::to_string(cap) + raise_hint("max_tensor_bytes"));
  return bytes;
}

}  // namespace rlx
