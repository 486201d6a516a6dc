// Shape inference for the indexing family: Gather, ScatterAdd, CacheWrite, ArgMax, ArgMin, TopK,
// Cumsum.
//
// Semantics decided here (see also the kernels in src/backends/cpu/kernels_indexing.cpp):
//  - Index operands take any integer dtype (i8, i16, i32, i64, u8, u32); bool and floats are
//    rejected. Negative indices count from the end; out-of-range indices fail at run time.
//  - ArgMax/ArgMin/TopK accept every dtype (bool compares as 0 < 1). NaN is ordered above
//    every number: ArgMax and ArgMin both return the first NaN (last with select_last), like
//    numpy; TopK(largest) puts NaNs first and TopK(smallest) puts them last, like torch.
//  - ArgMax/ArgMin over an empty axis is an error; TopK needs 1 <= k <= dim.
//  - ScatterAdd and Cumsum reject bool (there is no meaningful sum of bools in the same dtype).
#include <string>

#include "rlx/error.h"
#include "rlx/ops.h"

namespace rlx {
namespace {

// Normalizes `axis` for an operand of shape `s`, with a message that shows the shape.
int64_t axis_for(int64_t axis, const Shape& s, const char* op, const char* operand = "input") {
  const int64_t r = s.rank();
  if (r == 0)
    throw Error(std::string(op) + ": " + operand + " " + s.str() +
                " is a scalar; the op needs a tensor of rank >= 1 to index an axis");
  if (axis < -r || axis >= r)
    throw Error(std::string(op) + ": axis " + std::to_string(axis) + " is out of range for " +
                operand + " " + s.str() + " (rank " + std::to_string(r) + "); expected " +
                std::to_string(-r) + " <= axis < " + std::to_string(r));
  return normalize_axis(axis, r, std::string(op) + " axis");
}

void require_index_dtype(const Shape& s, const char* op) {
  if (!is_int(s.dtype))
    throw Error(std::string(op) + ": indices must have an integer dtype (i8, i16, i32, i64, u8, u32), got " +
                s.str());
}

void require_not_bool(const Shape& s, const char* op) {
  if (s.dtype == DType::Bool)
    throw Error(std::string(op) + ": bool input " + s.str() +
                " is not supported; cast it to an integer or float dtype first");
}

template <class Op>
std::vector<Shape> infer_arg(const Op& op, std::span<const Shape> in) {
  const Shape& x = in[0];
  const int64_t a = axis_for(op.axis, x, Op::kName);
  const Dim& d = x.dims[static_cast<size_t>(a)];
  if (d.is_static() && d.value == 0)
    throw Error(std::string(Op::kName) + ": axis " + std::to_string(op.axis) + " of input " + x.str() +
                " has size 0; there is no element to select");
  std::vector<Dim> out;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i == a) {
      if (op.keep_dims) out.emplace_back(1);
    } else {
      out.push_back(x.dims[static_cast<size_t>(i)]);
    }
  }
  return {Shape(std::move(out), DType::I64)};
}

}  // namespace

std::vector<Shape> ops::Gather::infer(std::span<const Shape> in) const {
  const Shape& data = in[0];
  const Shape& idx = in[1];
  require_index_dtype(idx, kName);
  const int64_t a = axis_for(axis, data, kName, "data");
  std::vector<Dim> out(data.dims.begin(), data.dims.begin() + a);
  out.insert(out.end(), idx.dims.begin(), idx.dims.end());
  out.insert(out.end(), data.dims.begin() + a + 1, data.dims.end());
  return {Shape(std::move(out), data.dtype)};
}

std::vector<Shape> ops::ScatterAdd::infer(std::span<const Shape> in) const {
  const Shape& data = in[0];
  const Shape& idx = in[1];
  const Shape& upd = in[2];
  require_index_dtype(idx, kName);
  require_not_bool(data, kName);
  if (upd.dtype != data.dtype)
    throw Error(std::string(kName) + ": updates " + upd.str() + " must have the dtype of data " + data.str());
  const int64_t a = axis_for(axis, data, kName, "data");
  if (idx.rank() != data.rank())
    throw Error(std::string(kName) + ": indices " + idx.str() + " must have the rank of data " + data.str());
  if (upd.dims != idx.dims)
    throw Error(std::string(kName) + ": updates " + upd.str() + " must have the shape of indices " + idx.str());
  for (int64_t d = 0; d < data.rank(); ++d) {
    if (d == a) continue;
    const Dim& di = idx.dims[static_cast<size_t>(d)];
    const Dim& dd = data.dims[static_cast<size_t>(d)];
    if (di.is_static() && dd.is_static() && di.value > dd.value)
      throw Error(std::string(kName) + ": indices " + idx.str() + " dim " + std::to_string(d) + " (" +
                  di.str() + ") exceeds data " + data.str() + " dim " + std::to_string(d) + " (" + dd.str() +
                  "); every dim except axis " + std::to_string(a) + " must be <= data's");
  }
  return {data};
}

std::vector<Shape> ops::CacheWrite::infer(std::span<const Shape> in) const {
  const Shape& cache = in[0];
  const Shape& rows = in[1];
  const Shape& pos = in[2];
  if (cache.rank() < 2)
    throw Error(std::string(kName) + ": cache " + cache.str() + " must have rank >= 2 (batch, rows, ...)");
  if (rows.dtype != cache.dtype)
    throw Error(std::string(kName) + ": rows " + rows.str() + " must have the cache's dtype " + cache.str() +
                " (cast them)");
  if (rows.rank() != cache.rank())
    throw Error(std::string(kName) + ": rows " + rows.str() + " must have the cache's rank (" + cache.str() +
                "): (batch, new rows, ...)");
  for (int64_t d = 0; d < cache.rank(); ++d) {
    if (d == 1) continue;
    const Dim& a = rows.dims[static_cast<size_t>(d)];
    const Dim& b = cache.dims[static_cast<size_t>(d)];
    if (a.is_static() && b.is_static() && a.value != b.value)
      throw Error(std::string(kName) + ": rows " + rows.str() + " and cache " + cache.str() + " differ in dim " +
                  std::to_string(d) + "; only dim 1 (the row count) may differ");
  }
  if (pos.dtype != DType::I32 && pos.dtype != DType::I64)
    throw Error(std::string(kName) + ": positions must be i32 or i64, got " + pos.str() + " (cast them)");
  if (pos.rank() != 1 && pos.rank() != 2)
    throw Error(std::string(kName) + ": positions must be (S), one per new row, or (B, S), one per row of each "
                "batch entry; got " + pos.str());
  const Dim& s = pos.dims.back();
  const Dim& r = rows.dims[1];
  if (s.is_static() && r.is_static() && s.value != r.value)
    throw Error(std::string(kName) + ": " + std::to_string(s.value) + " positions " + pos.str() + " for " +
                std::to_string(r.value) + " rows " + rows.str() + "; give one position per row");
  if (pos.rank() == 2) {
    const Dim& pb = pos.dims[0];
    const Dim& b = rows.dims[0];
    if (pb.is_static() && b.is_static() && pb.value != b.value)
      throw Error(std::string(kName) + ": positions " + pos.str() + " are per batch entry but the rows " + rows.str() +
                  " have batch " + std::to_string(b.value) + "; give (B, S) positions of the rows' batch, or (S) "
                  "positions shared by the batch");
  }
  return {cache};
}

std::vector<Shape> ops::ArgMax::infer(std::span<const Shape> in) const { return infer_arg(*this, in); }
std::vector<Shape> ops::ArgMin::infer(std::span<const Shape> in) const { return infer_arg(*this, in); }

std::vector<Shape> ops::TopK::infer(std::span<const Shape> in) const {
  const Shape& x = in[0];
  const int64_t a = axis_for(axis, x, kName);
  if (k < 1) throw Error(std::string(kName) + ": k must be >= 1, got " + std::to_string(k));
  const Dim& d = x.dims[static_cast<size_t>(a)];
  if (d.is_static() && k > d.value)
    throw Error(std::string(kName) + ": k = " + std::to_string(k) + " exceeds the size " + d.str() + " of axis " +
                std::to_string(axis) + " of input " + x.str());
  std::vector<Dim> out = x.dims;
  out[static_cast<size_t>(a)] = Dim(k);
  return {Shape(out, x.dtype), Shape(out, DType::I64)};
}

std::vector<Shape> ops::Cumsum::infer(std::span<const Shape> in) const {
  const Shape& x = in[0];
  require_not_bool(x, kName);
  axis_for(axis, x, kName);
  return {x};
}

}  // namespace rlx
