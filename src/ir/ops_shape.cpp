// Shape inference for the shape family: Reshape, Transpose, Narrow, Concat, Expand, Reverse,
// StopGradient. Every op keeps its input dtype.
//
// Decisions:
//  - Reshape: target dims are >= 0 (0 is a real zero-size dim) or one -1, which is inferred.
//    Symbolic dims of the input cancel against the same symbols in the target; a -1 may stand
//    for exactly one remaining input symbol when the static parts match ([batch, 768] ->
//    [-1, 12, 64] gives [batch, 12, 64]). Anything whose element count cannot be proven equal
//    is rejected.
//  - Transpose: perm is a permutation of the axes (negative entries count from the end).
//  - Narrow: start may be negative (counts from the end); 0 <= start, start + len <= dim,
//    len >= 0. On a symbolic dim the range is checked by the kernel at run time.
//  - Concat: same dtype and rank, dims other than `axis` equal; the axis dims must be static
//    (or exactly one symbolic input dim with the other inputs of size 0 there).
//  - Expand: numpy broadcast_to: the target has rank >= the input's; each input dim must equal
//    its target dim or be 1; a target dim of -1 keeps the input's dim.
//  - Reverse: axes may be negative, duplicates are rejected; no axes = identity.
#include <algorithm>
#include <string>
#include <vector>

#include "rlx/limits.h"
#include "rlx/error.h"
#include "rlx/ops.h"

namespace rlx {
namespace {

std::string list_text(const std::vector<std::string>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + v[i];
  return s + "}";
}

int64_t axis_of(int64_t axis, const Shape& s, const std::string& what) {
  if (s.rank() == 0)
    throw Error(what + ": input " + s.str() + " is a scalar; the op needs a tensor of rank >= 1");
  if (axis < -s.rank() || axis >= s.rank())
    throw Error(what + ": axis " + std::to_string(axis) + " is out of range for input " + s.str() + " (valid: " +
                std::to_string(-s.rank()) + ".." + std::to_string(s.rank() - 1) + ")");
  return normalize_axis(axis, s.rank(), what);
}

}  // namespace

std::vector<Shape> ops::Reshape::infer(std::span<const Shape> in) const {
  const Shape& x = in[0];
  const std::string ctx = "reshape of " + x.str() + " to " + dims_str(shape);
  int64_t infer_at = -1;
  int64_t tgt_static = 1, in_static = 1;
  std::vector<std::string> in_syms, tgt_syms;
  for (size_t i = 0; i < shape.size(); ++i) {
    const Dim& d = shape[i];
    if (d.is_symbolic()) {
      tgt_syms.push_back(d.sym);
    } else if (d.value == -1) {
      if (infer_at >= 0)
        throw Error(ctx + ": at most one dim may be -1 (dims " + std::to_string(infer_at) + " and " +
                    std::to_string(i) + " both are)");
      infer_at = static_cast<int64_t>(i);
    } else if (d.value < 0) {
      throw Error(ctx + ": dim " + std::to_string(i) + " is " + std::to_string(d.value) +
                  "; dims must be >= 0, or -1 (once) to infer");
    } else {
      tgt_static = checked_mul(tgt_static, d.value, ctx + ": target element count");
    }
  }
  for (const Dim& d : x.dims) {
    if (d.is_symbolic()) in_syms.push_back(d.sym);
    else in_static = checked_mul(in_static, d.value, ctx + ": input element count");
  }
  // Cancel symbols present on both sides.
  for (auto it = tgt_syms.begin(); it != tgt_syms.end();) {
    auto f = std::find(in_syms.begin(), in_syms.end(), *it);
    if (f != in_syms.end()) {
      in_syms.erase(f);
      it = tgt_syms.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<Dim> out = shape;
  if (infer_at >= 0) {
    if (!tgt_syms.empty())
      throw Error(ctx + ": cannot infer -1: the target has symbolic dims " + list_text(tgt_syms) +
                  " that the input does not have");
    if (in_syms.empty()) {
      if (tgt_static == 0)
        throw Error(ctx + ": cannot infer -1 when another target dim is 0 (the size is ambiguous)");
      if (in_static % tgt_static != 0)
        throw Error(ctx + ": element count mismatch: the input has " + std::to_string(in_static) +
                    " elements, which is not a multiple of the " + std::to_string(tgt_static) +
                    " of the known target dims");
      out[static_cast<size_t>(infer_at)] = Dim(in_static / tgt_static);
    } else if (in_syms.size() == 1 && in_static == tgt_static && tgt_static != 0) {
      out[static_cast<size_t>(infer_at)] = Dim::symbol(in_syms[0]);
    } else {
      throw Error(ctx + ": cannot infer -1 from the symbolic input dims " + list_text(in_syms) +
                  " (it would not be a single dim); give the target dims explicitly");
    }
  } else {
    if (!in_syms.empty() || !tgt_syms.empty())
      throw Error(ctx + ": cannot prove the element counts equal: symbolic dims " + list_text(in_syms) +
                  " of the input vs " + list_text(tgt_syms) + " of the target");
    if (in_static != tgt_static)
      throw Error(ctx + ": element count mismatch: the input has " + std::to_string(in_static) +
                  " elements, the target shape " + std::to_string(tgt_static));
  }
  return {Shape(out, x.dtype)};
}

std::vector<Shape> ops::Transpose::infer(std::span<const Shape> in) const {
  const Shape& x = in[0];
  const int64_t r = x.rank();
  if (static_cast<int64_t>(perm.size()) != r)
    throw Error("transpose: perm " + dims_str(perm) + " has " + std::to_string(perm.size()) +
                " entries but the input " + x.str() + " has rank " + std::to_string(r));
  std::vector<bool> seen(static_cast<size_t>(r), false);
  std::vector<Dim> out;
  out.reserve(static_cast<size_t>(r));
  for (int64_t p : perm) {
    if (p < -r || p >= r)
      throw Error("transpose: perm " + dims_str(perm) + " has entry " + std::to_string(p) +
                  " out of range for input " + x.str() + " (valid: " + std::to_string(-r) + ".." +
                  std::to_string(r - 1) + ")");
    const int64_t a = p < 0 ? p + r : p;
    if (seen[static_cast<size_t>(a)])
      throw Error("transpose: perm " + dims_str(perm) + " is not a permutation: axis " + std::to_string(a) +
                  " appears twice");
    seen[static_cast<size_t>(a)] = true;
    out.push_back(x.dims[static_cast<size_t>(a)]);
  }
  return {Shape(out, x.dtype)};
}

std::vector<Shape> ops::Narrow::infer(std::span<const Shape> in) const {
  const Shape& x = in[0];
  const std::string what = "narrow";
  const int64_t ax = axis_of(axis, x, what);
  const Dim& d = x.dims[static_cast<size_t>(ax)];
  const std::string range = "[" + std::to_string(start) + ", " + std::to_string(start) + "+" + std::to_string(len) + ")";
  if (len < 0) throw Error(what + ": len " + std::to_string(len) + " is negative (input " + x.str() + ")");
  if (d.is_static()) {
    const int64_t s = start < 0 ? start + d.value : start;
    if (s < 0 || s > d.value || len > d.value - s)
      throw Error(what + ": range " + range + " is out of bounds for axis " + std::to_string(axis) + " of size " +
                  std::to_string(d.value) + " (input " + x.str() + "); need -size <= start, start + len <= size");
  }
  std::vector<Dim> out = x.dims;
  out[static_cast<size_t>(ax)] = Dim(len);
  return {Shape(out, x.dtype)};
}

std::vector<Shape> ops::Concat::infer(std::span<const Shape> in) const {
  const Shape& x0 = in[0];
  const int64_t ax = axis_of(axis, x0, "concat");
  std::vector<Dim> out = x0.dims;
  int64_t total = 0;
  std::vector<size_t> sym_inputs;
  for (size_t i = 0; i < in.size(); ++i) {
    const Shape& s = in[i];
    if (s.dtype != x0.dtype)
      throw Error("concat: input " + std::to_string(i) + " " + s.str() + " has a different dtype than input 0 " +
                  x0.str() + "; all inputs must share a dtype");
    if (s.rank() != x0.rank())
      throw Error("concat: input " + std::to_string(i) + " " + s.str() + " has rank " + std::to_string(s.rank()) +
                  " but input 0 " + x0.str() + " has rank " + std::to_string(x0.rank()));
    for (int64_t d = 0; d < s.rank(); ++d) {
      if (d == ax) continue;
      if (s.dims[static_cast<size_t>(d)] != x0.dims[static_cast<size_t>(d)])
        throw Error("concat along axis " + std::to_string(ax) + ": input " + std::to_string(i) + " " + s.str() +
                    " differs from input 0 " + x0.str() + " in dim " + std::to_string(d) +
                    " (every dim except the concat axis must match)");
    }
    const Dim& a = s.dims[static_cast<size_t>(ax)];
    if (a.is_symbolic()) sym_inputs.push_back(i);
    else total = checked_add(total, a.value, "concat along axis " + std::to_string(ax) + ": output size");
  }
  if (sym_inputs.empty()) {
    out[static_cast<size_t>(ax)] = Dim(total);
  } else if (sym_inputs.size() == 1 && total == 0) {
    out[static_cast<size_t>(ax)] = in[sym_inputs[0]].dims[static_cast<size_t>(ax)];
  } else {
    throw Error("concat along axis " + std::to_string(ax) + ": input " + std::to_string(sym_inputs[0]) + " " +
                in[sym_inputs[0]].str() +
                " has a symbolic size there, so the output size is not a single dim; the axis dims must be static");
  }
  return {Shape(out, x0.dtype)};
}

std::vector<Shape> ops::Expand::infer(std::span<const Shape> in) const {
  const Shape& x = in[0];
  const std::string ctx = "expand of " + x.str() + " to " + dims_str(shape);
  const int64_t r = static_cast<int64_t>(shape.size());
  if (r < x.rank())
    throw Error(ctx + ": the target rank " + std::to_string(r) + " is lower than the input rank " +
                std::to_string(x.rank()));
  const int64_t lead = r - x.rank();
  std::vector<Dim> out(shape.size());
  for (int64_t i = 0; i < r; ++i) {
    const Dim& t = shape[static_cast<size_t>(i)];
    if (t.is_static() && t.value < -1)
      throw Error(ctx + ": target dim " + std::to_string(i) + " is " + std::to_string(t.value) +
                  "; dims must be >= 0 or -1 (keep the input dim)");
    if (i < lead) {
      if (t.is_static() && t.value == -1)
        throw Error(ctx + ": target dim " + std::to_string(i) + " is -1 but it is a new leading dim (no input dim to keep)");
      out[static_cast<size_t>(i)] = t;
      continue;
    }
    const Dim& s = x.dims[static_cast<size_t>(i - lead)];
    if (t.is_static() && t.value == -1) {
      out[static_cast<size_t>(i)] = s;
    } else if (s == t || (s.is_static() && s.value == 1)) {
      out[static_cast<size_t>(i)] = t;
    } else if (s.is_symbolic() && t.is_static()) {
      out[static_cast<size_t>(i)] = t;  // binds the symbol (checked against the real size at run time)
    } else {
      throw Error(ctx + ": input dim " + std::to_string(i - lead) + " (" + s.str() + ") cannot broadcast to target dim " +
                  std::to_string(i) + " (" + t.str() + "); each input dim must equal its target dim or be 1");
    }
  }
  return {Shape(out, x.dtype)};
}

std::vector<Shape> ops::Reverse::infer(std::span<const Shape> in) const {
  const Shape& x = in[0];
  std::vector<int64_t> seen;
  for (int64_t a : axes) {
    if (a < -x.rank() || a >= x.rank())
      throw Error("reverse: axis " + std::to_string(a) + " is out of range for input " + x.str() + " (valid: " +
                  std::to_string(-x.rank()) + ".." + std::to_string(x.rank() - 1) + ")");
    const int64_t n = normalize_axis(a, x.rank(), "reverse");
    if (std::find(seen.begin(), seen.end(), n) != seen.end())
      throw Error("reverse: axes " + dims_str(axes) + " name axis " + std::to_string(n) + " twice");
    seen.push_back(n);
  }
  return {x};
}

std::vector<Shape> ops::StopGradient::infer(std::span<const Shape> in) const { return {in[0]}; }

}  // namespace rlx
