// ONNX indexing ops: Gather, GatherElements, GatherND, ScatterElements, ScatterND, OneHot,
// NonZero and Compress (known operands only). Element-wise gathers and scatters become a
// linear index into the flattened data (IR Gather / ScatterAdd).
#include <cmath>
#include <limits>
#include <numeric>

#include "io/onnx/importer.h"
#include "rlx/limits.h"

namespace rlx::onnx_io {
namespace {

using V = std::vector<Val>;

std::vector<int64_t> static_dims(const NodeCtx& c, size_t i, const char* what) {
  const Shape& s = c.shape(i);
  if (!s.is_static()) c.fail(std::string(what) + " needs a static shape, got " + s.str());
  return s.concrete();
}

// Negative indices count from the end of a dim of size n (n: scalar or broadcastable).
Value wrap_negative(const NodeCtx& c, Value idx, Value n) {
  auto& g = c.g();
  Value zero = g.constant(Tensor::scalar_i64(0));
  return g.where(g.compare(CompareKind::Lt, idx, zero), g.add(idx, n), idx);
}

Value as_i64(const NodeCtx& c, Value v) { return c.cast_to(v, DType::I64); }

// ONNX index operands are int32 or int64: a float index is an error, never truncated.
void need_index_type(const NodeCtx& c, size_t i, const std::string& what) {
  const DType t = c.shape(i).dtype;
  if (t != DType::I32 && t != DType::I64)
    c.fail("input " + std::to_string(i) + " (" + what + ") must be int32 or int64, got " + c.shape(i).str());
}

// "[1,0]": the position of flat element `flat` in a tensor of shape `dims`.
std::string position(int64_t flat, const std::vector<int64_t>& dims) {
  std::vector<int64_t> pos(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    pos[d] = dims[d] > 0 ? flat % dims[d] : 0;
    flat = dims[d] > 0 ? flat / dims[d] : 0;
  }
  return dims_str(pos);
}

// Indices known at import time are checked here, where the error can name the ONNX node and
// the index as the model wrote it (the lowered IR only sees a flattened linear index).
// `size_of(flat)` gives the size of the dim that element `flat` of the indices indexes.
template <class F>
void check_known_indices(const NodeCtx& c, size_t i, F size_of) {
  const Val& v = c.in(i);
  const Tensor* t = v.konst ? &*v.konst : v.hint ? &*v.hint : nullptr;
  if (!t) return;
  const auto idx = t->to_i64();
  for (size_t k = 0; k < idx.size(); ++k) {
    const int64_t n = size_of(static_cast<int64_t>(k));
    if (idx[k] < -n || idx[k] >= n)
      c.fail("indices" + position(static_cast<int64_t>(k), t->shape()) + " = " + std::to_string(idx[k]) +
             " is out of range for a dim of size " + std::to_string(n) + " (valid: " + std::to_string(-n) + " to " +
             std::to_string(n - 1) + ")");
  }
}

// Element-wise gathers/scatters: indices (and updates) have data's rank and, off the axis,
// no dim larger than data's (else positions would land in other rows).
void need_elementwise_fit(const NodeCtx& c, const std::vector<int64_t>& dd, const std::vector<int64_t>& id, int64_t axis) {
  for (size_t d = 0; d < dd.size(); ++d)
    if (static_cast<int64_t>(d) != axis && id[d] > dd[d])
      c.fail("indices " + dims_str(id) + " are larger than data " + dims_str(dd) + " in dim " + std::to_string(d) +
             " (only the axis " + std::to_string(axis) + " may differ)");
}

// For a tensor of shape `shape`, the linear offset in a tensor of strides `strides` of every
// position, skipping dim `skip` (a constant of `shape`).
Tensor offsets(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, int64_t skip) {
  const int64_t n = product(shape);
  std::vector<int64_t> out(static_cast<size_t>(n));
  std::vector<int64_t> pos(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < shape.size(); ++d)
      if (static_cast<int64_t>(d) != skip) off += pos[d] * strides[d];
    out[static_cast<size_t>(i)] = off;
    for (size_t d = shape.size(); d-- > 0;) {
      if (++pos[d] < shape[d]) break;
      pos[d] = 0;
    }
  }
  return Tensor::i64(shape, out);
}

V gather(const NodeCtx& c) {
  c.allow_only({"axis"});
  need_index_type(c, 1, "indices");
  const Val& x = c.in(0);
  if (x.dims && !x.konst && x.shape.rank() == 1 && c.in(1).konst) {  // picking entries of a symbolic shape
    const auto idx = tensor_ints(*c.in(1).konst);
    const auto n = static_cast<int64_t>(x.dims->size());
    std::vector<Dim> picked;
    for (int64_t i : idx) {
      if (i < -n || i >= n) c.fail("index " + std::to_string(i) + " is out of range for a shape of rank " + std::to_string(n));
      picked.push_back((*x.dims)[static_cast<size_t>(i < 0 ? i + n : i)]);
    }
    return {shape_val(picked, c.in(1).konst->rank() == 0)};
  }
  const int64_t axis = normalize_axis(c.i("axis", 0), c.shape(0).rank(), "Gather axis");
  const Dim& n = c.shape(0).dims[static_cast<size_t>(axis)];
  if (n.is_static()) check_known_indices(c, 1, [&](int64_t) { return n.value; });
  return {c.out(c.g().gather(c.value(0), as_i64(c, c.value(1)), axis))};
}

// The linear index into flattened data for an element-wise op along `axis`.
Value elementwise_linear(const NodeCtx& c, const std::vector<int64_t>& dd, const std::vector<int64_t>& id, int64_t axis,
                         Value idx) {
  auto& g = c.g();
  const auto strides = contiguous_strides(dd);
  idx = wrap_negative(c, as_i64(c, idx), g.constant(Tensor::scalar_i64(dd[static_cast<size_t>(axis)])));
  Value lin = g.mul(idx, g.constant(Tensor::scalar_i64(strides[static_cast<size_t>(axis)])));
  return g.add(lin, g.constant(offsets(id, strides, axis)));
}

V gather_elements(const NodeCtx& c) {
  c.allow_only({"axis"});
  const auto dd = static_dims(c, 0, "GatherElements data");
  const auto id = static_dims(c, 1, "GatherElements indices");
  need_index_type(c, 1, "indices");
  if (dd.size() != id.size()) c.fail("data and indices must have the same rank");
  const int64_t axis = normalize_axis(c.i("axis", 0), static_cast<int64_t>(dd.size()), "axis");
  need_elementwise_fit(c, dd, id, axis);
  check_known_indices(c, 1, [&](int64_t) { return dd[static_cast<size_t>(axis)]; });
  auto& g = c.g();
  Value lin = elementwise_linear(c, dd, id, axis, c.value(1));
  return {c.out(g.gather(g.reshape(c.value(0), {product(dd)}), lin, 0))};
}

// out = data with out[lin[i]] (op)= updates[i], for flat data and flat lin/updates.
Value scatter_flat(const NodeCtx& c, Value flat, Value lin, Value upd, const std::string& reduction) {
  auto& g = c.g();
  const DType dt = g.shape(flat).dtype;
  const auto n = g.shape(flat).dims;
  Value zeros = g.expand(c.scalar_like(0.0, dt), n);
  if (reduction == "add") return g.scatter_add(flat, lin, upd, 0);
  if (reduction == "mul" || reduction == "max" || reduction == "min") {
    // Dense form: hit[u, p] = (lin[u] == p); every update folds into its position.
    const Dim& P = n[0];
    const Dim& U = g.shape(upd).dims[0];
    if (P.is_symbolic() || U.is_symbolic() || (U.value > 0 && P.value > (int64_t{1} << 22) / U.value))
      c.fail("reduction '" + reduction + "' needs static sizes with updates x data at most 2^22");
    std::vector<int64_t> iota(static_cast<size_t>(P.value));
    for (int64_t i = 0; i < P.value; ++i) iota[static_cast<size_t>(i)] = i;
    Value hit = g.compare(CompareKind::Eq, g.reshape(lin, {U, Dim(1)}), g.constant(Tensor::i64({1, P.value}, iota)));
    Value u2 = g.reshape(upd, {U, Dim(1)});
    if (reduction == "mul")
      return g.mul(flat, g.reduce(ReduceKind::Prod, g.where(hit, u2, c.scalar_like(1.0, dt)), {0}, false));
    if (!is_float(dt)) c.fail("reduction '" + reduction + "' on integers is not supported");
    const bool is_max = reduction == "max";
    const double fill = is_max ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    Value filled = g.where(hit, u2, c.scalar_like(fill, dt));
    Value best = g.reduce(is_max ? ReduceKind::Max : ReduceKind::Min, filled, {0}, false);
    Value any = g.reduce(ReduceKind::Max, g.cast(hit, DType::F32), {0}, false);
    Value merged = is_max ? g.max(flat, best) : g.min(flat, best);
    return g.where(g.compare(CompareKind::Gt, any, g.constant(Tensor::scalar_f32(0))), merged, flat);
  }
  if (reduction != "none") c.fail("reduction '" + reduction + "' is not one of none, add, mul, max, min");
  Value ones = g.expand(c.scalar_like(1.0, dt), g.shape(upd).dims);
  Value hit = g.compare(CompareKind::Gt, g.scatter_add(zeros, lin, ones, 0), c.scalar_like(0.0, dt));
  return g.where(hit, g.scatter_add(zeros, lin, upd, 0), flat);
}

V scatter_elements(const NodeCtx& c) {
  c.allow_only({"axis", "reduction"});
  const auto dd = static_dims(c, 0, "ScatterElements data");
  const auto id = static_dims(c, 1, "ScatterElements indices");
  need_index_type(c, 1, "indices");
  if (dd.size() != id.size()) c.fail("data and indices must have the same rank");
  const int64_t axis = normalize_axis(c.i("axis", 0), static_cast<int64_t>(dd.size()), "axis");
  need_elementwise_fit(c, dd, id, axis);
  if (c.shape(2).dims != c.shape(1).dims)
    c.fail("updates " + c.shape(2).str() + " must have the indices' shape " + c.shape(1).str());
  check_known_indices(c, 1, [&](int64_t) { return dd[static_cast<size_t>(axis)]; });
  auto& g = c.g();
  const int64_t ni = product(id);
  Value lin = g.reshape(elementwise_linear(c, dd, id, axis, c.value(1)), {ni});
  Value upd = g.reshape(c.value(2), {ni});
  Value flat = g.reshape(c.value(0), {product(dd)});
  Value out = scatter_flat(c, flat, lin, upd, c.s("reduction", "none"));
  return {c.out(g.reshape(out, std::vector<Dim>(dd.begin(), dd.end())))};
}

// GatherND/ScatterND: the linear row index (into data viewed as (rows, slice)) of each index tuple.
struct NdIndex {
  Value rows;           // i64, shape = indices.shape[:-1]
  int64_t num_rows = 0;  // product of data dims [0, batch + k)
  int64_t slice = 0;     // product of data dims [batch + k, rank)
  std::vector<int64_t> out_prefix;
};

NdIndex nd_index(const NodeCtx& c, const std::vector<int64_t>& dd, const std::vector<int64_t>& id, int64_t batch) {
  auto& g = c.g();
  need_index_type(c, 1, "indices");
  if (id.empty()) c.fail("indices must have rank >= 1");
  const int64_t k = id.back();
  const auto rank = static_cast<int64_t>(dd.size());
  if (batch < 0 || batch >= std::min<int64_t>(rank, static_cast<int64_t>(id.size())))
    c.fail("batch_dims " + std::to_string(batch) + " must be in [0, min(data rank " + std::to_string(rank) +
           ", indices rank " + std::to_string(id.size()) + "))");
  for (int64_t b = 0; b < batch; ++b)
    if (dd[static_cast<size_t>(b)] != id[static_cast<size_t>(b)])
      c.fail("the first batch_dims dims of data " + dims_str(dd) + " and indices " + dims_str(id) + " must be equal");
  if (k < 1 || batch + k > rank)
    c.fail("the last indices dim (index tuple length) is " + std::to_string(k) + "; it must be in [1, " +
           std::to_string(rank - batch) + "] for data " + dims_str(dd) + " with batch_dims " + std::to_string(batch));
  check_known_indices(c, 1, [&](int64_t flat) { return dd[static_cast<size_t>(batch + flat % k)]; });
  NdIndex r;
  r.num_rows = std::accumulate(dd.begin(), dd.begin() + batch + k, int64_t{1}, std::multiplies<>());
  r.slice = std::accumulate(dd.begin() + batch + k, dd.end(), int64_t{1}, std::multiplies<>());
  std::vector<int64_t> prefix(id.begin(), id.end() - 1);
  r.out_prefix = prefix;
  // strides of the (batch..., k...) row space
  std::vector<int64_t> row_dims(dd.begin(), dd.begin() + batch + k);
  const auto rs = contiguous_strides(row_dims);
  Value idx = as_i64(c, c.value(1));
  Value lin = g.constant(Tensor::scalar_i64(0));
  for (int64_t j = 0; j < k; ++j) {
    Value col = g.reshape(g.narrow(idx, static_cast<int64_t>(id.size()) - 1, j, 1), std::vector<Dim>(prefix.begin(), prefix.end()));
    col = wrap_negative(c, col, g.constant(Tensor::scalar_i64(dd[static_cast<size_t>(batch + j)])));
    lin = g.add(lin, g.mul(col, g.constant(Tensor::scalar_i64(rs[static_cast<size_t>(batch + j)]))));
  }
  if (batch > 0) {  // each position's batch offset
    std::vector<int64_t> bstr(rs.begin(), rs.begin() + batch);
    std::vector<int64_t> full(prefix.size(), 0);
    for (int64_t b = 0; b < batch; ++b) full[static_cast<size_t>(b)] = bstr[static_cast<size_t>(b)];
    lin = g.add(lin, g.constant(offsets(prefix, full, -1)));
  }
  r.rows = g.expand(lin, std::vector<Dim>(prefix.begin(), prefix.end()));
  return r;
}

V gather_nd(const NodeCtx& c) {
  c.allow_only({"batch_dims"});
  const auto dd = static_dims(c, 0, "GatherND data");
  const auto id = static_dims(c, 1, "GatherND indices");
  const int64_t batch = c.i("batch_dims", 0);
  NdIndex nd = nd_index(c, dd, id, batch);
  auto& g = c.g();
  Value data = g.reshape(c.value(0), {nd.num_rows, nd.slice});
  Value out = g.gather(data, nd.rows, 0);
  std::vector<Dim> shape(nd.out_prefix.begin(), nd.out_prefix.end());
  for (size_t d = static_cast<size_t>(batch + id.back()); d < dd.size(); ++d) shape.push_back(dd[d]);
  return {c.out(g.reshape(out, shape))};
}

V scatter_nd(const NodeCtx& c) {
  c.allow_only({"reduction"});
  const auto dd = static_dims(c, 0, "ScatterND data");
  const auto id = static_dims(c, 1, "ScatterND indices");
  NdIndex nd = nd_index(c, dd, id, 0);
  auto& g = c.g();
  std::vector<Dim> want(nd.out_prefix.begin(), nd.out_prefix.end());
  for (size_t d = static_cast<size_t>(id.back()); d < dd.size(); ++d) want.push_back(dd[d]);
  if (c.shape(2).dims != want)
    c.fail("updates " + c.shape(2).str() + " must have shape indices.shape[:-1] + data.shape[k:] = " + dims_str(want));
  const int64_t q = product(nd.out_prefix);
  Value rows = g.reshape(nd.rows, {q, 1});
  Value lin = g.add(g.mul(rows, g.constant(Tensor::scalar_i64(nd.slice))),
                    g.constant(offsets({1, nd.slice}, {0, 1}, -1)));
  lin = g.reshape(g.expand(lin, {q, nd.slice}), {q * nd.slice});
  Value upd = g.reshape(c.value(2), {q * nd.slice});
  Value flat = g.reshape(c.value(0), {product(dd)});
  Value out = scatter_flat(c, flat, lin, upd, c.s("reduction", "none"));
  return {c.out(g.reshape(out, std::vector<Dim>(dd.begin(), dd.end())))};
}

V one_hot(const NodeCtx& c) {
  c.allow_only({"axis"});
  auto& g = c.g();
  const Tensor& dt = c.konst(1, "depth");
  if (dt.numel() != 1) c.fail("depth must hold one value, got " + dt.shape_info().str());
  const double depth_f = dt.to_f64()[0];
  // Checked before the conversion to an integer (NaN, inf or a huge value would be undefined).
  if (!std::isfinite(depth_f) || depth_f < 1 || depth_f > static_cast<double>(kMaxFoldElements))
    c.fail("depth " + std::to_string(depth_f) + " must be a finite value in [1, " + std::to_string(kMaxFoldElements) + "]");
  const auto depth = static_cast<int64_t>(depth_f);
  const Shape& vs = c.shape(2);
  if (vs.rank() != 1 || vs.dims[0] != Dim(2)) c.fail("values must be [off, on] (shape [2]), got " + vs.str());
  const auto& id = c.shape(0).dims;
  if (c.shape(0).is_static()) {
    std::vector<int64_t> out = c.shape(0).concrete();
    out.push_back(depth);
    checked_nbytes(out, vs.dtype, c.where() + " output");
  }
  const int64_t r = static_cast<int64_t>(id.size()) + 1;
  const int64_t axis = normalize_axis(c.i("axis", -1), r, "axis");
  Value idx = c.cast_to(c.value(0), DType::I64);
  idx = wrap_negative(c, idx, g.constant(Tensor::scalar_i64(depth)));
  std::vector<Dim> ishape(id.begin(), id.end());
  ishape.insert(ishape.begin() + axis, Dim(1));
  idx = g.reshape(idx, ishape);
  std::vector<int64_t> iota(static_cast<size_t>(depth));
  std::iota(iota.begin(), iota.end(), 0);
  std::vector<Dim> oshape(static_cast<size_t>(r), Dim(1));
  oshape[static_cast<size_t>(axis)] = depth;
  Value hot = g.compare(CompareKind::Eq, idx, g.reshape(g.constant(Tensor::i64({depth}, iota)), oshape));
  Value vals = c.value(2);
  Value off = g.reshape(g.narrow(vals, 0, 0, 1), std::vector<Dim>{});
  Value on = g.reshape(g.narrow(vals, 0, 1, 1), std::vector<Dim>{});
  return {c.out(g.where(hot, on, off))};
}

V non_zero(const NodeCtx& c) {
  c.allow_only({});
  const Val& x = c.in(0);
  if (!x.konst) c.fail("NonZero of a run-time tensor has a data-dependent shape, which rlx does not support");
  const auto d = x.konst->shape();
  const auto v = x.konst->to_f64();
  std::vector<int64_t> pos;
  const auto strides = contiguous_strides(d);
  int64_t count = 0;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != 0) ++count;
  std::vector<int64_t> out(static_cast<size_t>(count) * d.size());
  int64_t k = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == 0) continue;
    int64_t rem = static_cast<int64_t>(i);
    for (size_t a = 0; a < d.size(); ++a) {
      out[a * static_cast<size_t>(count) + static_cast<size_t>(k)] = rem / strides[a];
      rem %= strides[a];
    }
    ++k;
  }
  return {Val::known(Tensor::i64({static_cast<int64_t>(d.size()), count}, out))};
}

V compress(const NodeCtx& c) {
  c.allow_only({"axis"});
  const Tensor& ct = c.konst(1, "condition");
  if (ct.dtype() != DType::Bool || ct.rank() != 1) c.fail("condition must be a 1-d bool tensor, got " + ct.shape_info().str());
  const auto cond = ct.to_i64();
  auto& g = c.g();
  Value x = c.value(0);
  int64_t axis = 0;
  if (c.has("axis")) {
    axis = normalize_axis(c.i("axis", 0), c.shape(0).rank(), "axis");
  } else {
    const auto d = static_dims(c, 0, "Compress without axis");
    x = g.reshape(x, {product(d)});
  }
  const Dim& len = g.shape(x).dims[static_cast<size_t>(axis)];
  if (len.is_symbolic() || static_cast<int64_t>(cond.size()) > len.value)
    c.fail("condition has " + std::to_string(cond.size()) + " entries, more than the " + len.str() + " along the axis");
  std::vector<int64_t> idx;
  for (size_t i = 0; i < cond.size(); ++i)
    if (cond[i]) idx.push_back(static_cast<int64_t>(i));
  return {c.out(g.gather(x, g.constant(Tensor::i64({static_cast<int64_t>(idx.size())}, idx)), axis))};
}

}  // namespace

void register_indexing(ConverterTable& t) {
  t["Gather"] = gather;
  t["GatherElements"] = gather_elements;
  t["GatherND"] = gather_nd;
  t["ScatterElements"] = scatter_elements;
  t["Scatter"] = scatter_elements;
  t["ScatterND"] = scatter_nd;
  t["OneHot"] = one_hot;
  t["NonZero"] = non_zero;
  t["Compress"] = compress;
}

}  // namespace rlx::onnx_io
