// Shape inference for the reduction family: Reduce, Softmax, LogSoftmax.
//
// Semantics decided here (the CPU kernels are in src/backends/cpu/kernels_reduce.cpp):
//  - The output keeps the input dtype. Float Sum/Mean/Prod accumulate in double; integer
//    Sum/Prod wrap around in the input's width (two's complement), like numpy with a fixed
//    dtype. Integer Mean is the (64-bit) sum divided by the count, truncated toward zero.
//  - Max/Min propagate NaN (like numpy max/min).
//  - bool takes only Max (any) and Min (all); Sum/Mean/Prod of bool are rejected.
//  - Reducing zero elements: Sum -> 0, Prod -> 1, Mean -> NaN for floats; Mean of an integer
//    dtype, Max and Min are errors (at inference when the dims are static, else at run time).
//  - Softmax/LogSoftmax take float dtypes only and subtract the row max before exp.
#include <algorithm>
#include <string>

#include "rlx/error.h"
#include "rlx/ops.h"

namespace rlx {
namespace {

std::vector<Shape> infer_softmax(const char* name, int64_t axis, const Shape& x) {
  if (!is_float(x.dtype))
    throw Error(std::string(name) + ": input " + x.str() +
                " must have a float dtype (f32, f16, bf16, f64); cast integers first");
  const int64_t r = x.rank();
  if (r == 0)
    throw Error(std::string(name) + ": input " + x.str() + " is a scalar; expected rank >= 1");
  if (axis < -r || axis >= r)
    throw Error(std::string(name) + ": axis " + std::to_string(axis) + " is out of range for input " + x.str() +
                "; expected " + std::to_string(-r) + " <= axis < " + std::to_string(r));
  return {x};
}

}  // namespace

std::vector<Shape> ops::Reduce::infer(std::span<const Shape> in) const {
  const Shape& x = in[0];
  const int64_t r = x.rank();
  const char* kname = enum_name(kind);
  if (x.dtype == DType::Bool && kind != ReduceKind::Max && kind != ReduceKind::Min)
    throw Error(std::string(kName) + ": " + kname + " of bool input " + x.str() +
                " is not supported (only max = any and min = all); cast to an integer dtype first");
  std::vector<bool> reduced(static_cast<size_t>(r), axes.empty());
  for (int64_t a : axes) {
    if (a < -r || a >= r)
      throw Error(std::string(kName) + ": axis " + std::to_string(a) + " in axes " + dims_str(axes) +
                  " is out of range for input " + x.str() + "; expected " + std::to_string(-r) + " <= axis < " +
                  std::to_string(r));
    const int64_t n = normalize_axis(a, r, "reduce axis");
    if (reduced[static_cast<size_t>(n)])
      throw Error(std::string(kName) + ": axes " + dims_str(axes) + " name axis " + std::to_string(n) +
                  " more than once (input " + x.str() + ")");
    reduced[static_cast<size_t>(n)] = true;
  }
  // Reducing zero elements: only Sum, Prod and float Mean have a value.
  bool empty = false;
  for (int64_t d = 0; d < r; ++d) {
    const Dim& dim = x.dims[static_cast<size_t>(d)];
    if (reduced[static_cast<size_t>(d)] && dim.is_static() && dim.value == 0) empty = true;
  }
  if (empty) {
    if (kind == ReduceKind::Max || kind == ReduceKind::Min)
      throw Error(std::string(kName) + ": " + kname + " over axes " + dims_str(axes) + " of input " + x.str() +
                  " reduces zero elements, which has no identity; only sum, prod and mean allow it");
    if (kind == ReduceKind::Mean && !is_float(x.dtype))
      throw Error(std::string(kName) + ": mean over axes " + dims_str(axes) + " of integer input " + x.str() +
                  " reduces zero elements (division by zero)");
  }
  std::vector<Dim> out;
  for (int64_t d = 0; d < r; ++d) {
    if (reduced[static_cast<size_t>(d)]) {
      if (keep_dims) out.emplace_back(1);
    } else {
      out.push_back(x.dims[static_cast<size_t>(d)]);
    }
  }
  return {Shape(std::move(out), x.dtype)};
}

std::vector<Shape> ops::Softmax::infer(std::span<const Shape> in) const { return infer_softmax(kName, axis, in[0]); }
std::vector<Shape> ops::LogSoftmax::infer(std::span<const Shape> in) const {
  return infer_softmax(kName, axis, in[0]);
}

}  // namespace rlx
