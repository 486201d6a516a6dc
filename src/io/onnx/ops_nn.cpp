// ONNX neural-network ops: MatMul, Gemm, Conv, ConvTranspose, pooling, normalizations,
// Attention (decomposed into matmul/softmax), LRN.
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "io/onnx/conv_window.h"
#include "io/onnx/importer.h"
#include "io/onnx/proto.h"
#include "rlx/limits.h"

namespace rlx::onnx_io {
namespace {

using V = std::vector<Val>;

// Input i must have rank `r` (before any dims of it are read).
void need_rank(const NodeCtx& c, size_t i, int64_t r, const std::string& what) {
  if (c.shape(i).rank() != r)
    c.fail("input " + std::to_string(i) + " (" + what + ") must have rank " + std::to_string(r) + ", got " +
           c.shape(i).str());
}

V matmul(const NodeCtx& c) {
  c.allow_only({});
  return {c.out(c.g().matmul(c.value(0), c.value(1)))};
}

V gemm(const NodeCtx& c) {
  c.allow_only({"alpha", "beta", "transA", "transB", "broadcast"});
  auto& g = c.g();
  need_rank(c, 0, 2, "A");
  need_rank(c, 1, 2, "B");
  Value a = c.value(0), b = c.value(1);
  if (c.i("transA", 0)) a = g.transpose(a, {1, 0});
  if (c.i("transB", 0)) b = g.transpose(b, {1, 0});
  const DType dt = c.shape(0).dtype;
  Value y = g.matmul(a, b);
  const double alpha = c.f("alpha", 1.0), beta = c.f("beta", 1.0);
  if (alpha != 1.0) y = g.mul(y, c.scalar_like(alpha, dt));
  if (c.present(2)) {
    Value bias = c.value(2);
    if (beta != 1.0) bias = g.mul(bias, c.scalar_like(beta, dt));
    y = g.add(y, bias);
  }
  return {c.out(y)};
}

V conv(const NodeCtx& c) {
  c.allow_only({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  const Shape& ws = c.shape(1);
  const Window w = window(c, conv_kernel(c, 1));
  const int64_t group = c.i("group", 1);
  check_conv_group(c, 1, group);
  if (c.present(2) && (c.shape(2).rank() != 1 || c.shape(2).dims[0] != ws.dims[0]))
    c.fail("bias must be 1-d with one entry per output channel (" + ws.dims[0].str() + "), got " + c.shape(2).str());
  ops::Conv op{w.strides, w.pads, w.dilations, group};
  std::vector<Value> ins{c.value(0), c.value(1)};
  if (c.present(2)) ins.push_back(c.value(2));
  return {c.out(c.g().apply(op, ins))};
}

V conv_transpose(const NodeCtx& c) {
  c.allow_only({"auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads", "strides"});
  auto& g = c.g();
  const Shape& xs = c.shape(0);
  const Shape& ws = c.shape(1);
  if (!xs.is_static() || !ws.is_static()) c.fail("needs static input and weight shapes");
  const auto xd = xs.concrete();
  const auto wd = ws.concrete();
  if (xd.size() < 3 || wd.size() != xd.size()) c.fail("input and weights must have the same rank >= 3");
  const size_t k = xd.size() - 2;
  if (k != 1 && k != 2) c.fail(std::to_string(k) + "-d ConvTranspose is not supported (1-d and 2-d are)");
  std::vector<int64_t> kernel(wd.begin() + 2, wd.end());
  auto strides = c.ints("strides", std::vector<int64_t>(k, 1));
  auto dil = c.ints("dilations", std::vector<int64_t>(k, 1));
  auto outpad = c.ints("output_padding", std::vector<int64_t>(k, 0));
  auto pads = c.ints("pads", std::vector<int64_t>(2 * k, 0));
  if (strides.size() != k || dil.size() != k || outpad.size() != k || pads.size() != 2 * k)
    c.fail("strides, dilations, output_padding and pads must match the spatial dims");
  need_at_least(c, kernel, 1, "kernel dims");
  need_at_least(c, strides, 1, "strides");
  need_at_least(c, dil, 1, "dilations");
  need_at_least(c, outpad, 0, "output_padding");
  need_at_least(c, pads, 0, "pads");
  const int64_t group = c.i("group", 1);
  if (group < 1) c.fail("group is " + std::to_string(group) + "; it must be >= 1");
  if (xd[1] != wd[0]) c.fail("input channels " + std::to_string(xd[1]) + " != weight dim 0 " + std::to_string(wd[0]));
  if (xd[1] % group != 0) c.fail("group " + std::to_string(group) + " does not divide the input channels");
  if (c.has("kernel_shape") && c.ints("kernel_shape") != kernel) c.fail("kernel_shape does not match the weights");
  const std::string auto_pad = c.s("auto_pad", "NOTSET");
  std::vector<int64_t> out_shape = c.ints("output_shape");
  need_at_least(c, out_shape, 0, "output_shape");
  if (out_shape.size() > k) out_shape.erase(out_shape.begin(), out_shape.end() - static_cast<std::ptrdiff_t>(k));
  if (!out_shape.empty() && out_shape.size() != k)
    c.fail("output_shape has " + std::to_string(out_shape.size()) + " entries; it needs one per spatial dim (" +
           std::to_string(k) + ")");
  if (!out_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t i = 0; i < k; ++i) {
      const int64_t want = out_shape.empty() ? xd[i + 2] * strides[i] : out_shape[i];
      int64_t total = strides[i] * (xd[i + 2] - 1) + outpad[i] + ((kernel[i] - 1) * dil[i] + 1) - want;
      if (total < 0) {  // a larger output than the natural one: extra output padding at the end
        outpad[i] -= total;
        total = 0;
      }
      const int64_t half = total / 2;
      const bool lower = auto_pad == "SAME_LOWER";
      pads[i] = lower ? total - half : half;
      pads[i + k] = lower ? half : total - half;
    }
  } else if (auto_pad == "VALID") {
    std::fill(pads.begin(), pads.end(), 0);
  } else if (auto_pad != "NOTSET") {
    c.fail("auto_pad '" + auto_pad + "' is not supported");
  }
  Value x = c.value(0), wv = c.value(1);
  if (k == 1) {  // as 2-d with a unit height
    x = g.reshape(x, {xd[0], xd[1], 1, xd[2]});
    wv = g.reshape(wv, {wd[0], wd[1], 1, wd[2]});
    strides.insert(strides.begin(), 1);
    dil.insert(dil.begin(), 1);
    outpad.insert(outpad.begin(), 0);
    pads = {0, pads[0], 0, pads[1]};
  }
  ops::ConvTranspose op{strides, pads, dil, outpad, group};
  std::vector<Value> ins{x, wv};
  if (c.present(2)) ins.push_back(c.value(2));
  Value y = g.apply(op, ins);
  if (k == 1) {
    const auto& yd = g.shape(y).dims;
    y = g.reshape(y, {yd[0], yd[1], yd[3]});
  }
  return {c.out(y)};
}

Converter pool(PoolKind kind) {
  return [kind](const NodeCtx& c) -> V {
    c.allow_only({"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides",
                  "storage_order"});
    if (c.num_outputs() > 1 && !c.node().output(1).empty()) c.fail("the Indices output is not supported");
    if (c.i("storage_order", 0) != 0) c.fail("storage_order=1 is not supported");
    const auto kernel = c.ints("kernel_shape");
    if (kernel.empty()) c.fail("kernel_shape is required");
    const bool ceil_mode = c.i("ceil_mode", 0) != 0;
    Window w = window(c, kernel);
    ops::Pool p;
    p.kind = kind;
    p.kernel = w.kernel;
    p.stride = w.strides;
    p.pads = w.pads;
    p.dilation = w.dilations;
    p.count_include_pad = c.i("count_include_pad", 0) != 0;
    p.ceil_mode = ceil_mode;
    return {c.out(c.g().apply(p, {c.value(0)}))};
  };
}

V lp_pool(const NodeCtx& c) {
  c.allow_only({"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides", "p"});
  const auto kernel = c.ints("kernel_shape");
  if (kernel.empty()) c.fail("kernel_shape is required");
  const bool ceil_mode = c.i("ceil_mode", 0) != 0;
  Window w = window(c, kernel);
  auto& g = c.g();
  const DType dt = c.shape(0).dtype;
  if (c.i("p", 2) < 1) c.fail("p is " + std::to_string(c.i("p", 2)) + "; it must be >= 1");
  const double p = static_cast<double>(c.i("p", 2));
  ops::Pool op{PoolKind::Avg, w.kernel, w.strides, w.pads, w.dilations, true, ceil_mode};
  Value x = g.pow(g.act(ActKind::Abs, c.value(0)), c.scalar_like(p, dt));
  // The pool validates the window against the input first, so the kernel's element count is bounded.
  const Value pooled = g.apply(op, {x});
  const auto count = static_cast<double>(checked_numel(kernel, "LpPool kernel_shape"));
  Value s = g.mul(pooled, c.scalar_like(count, dt));
  return {c.out(g.pow(s, c.scalar_like(1.0 / p, dt)))};
}

Converter global_pool(ReduceKind kind) {
  return [kind](const NodeCtx& c) -> V {
    c.allow_only({});
    std::vector<int64_t> axes;
    for (int64_t i = 2; i < c.shape(0).rank(); ++i) axes.push_back(i);
    return {c.out(c.g().reduce(kind, c.value(0), axes, true))};
  };
}

// Mean/variance normalization over `axes` (kept), then scale and bias broadcast.
struct Moments {
  Value mean, centered, inv_std;
};
Moments moments(const NodeCtx& c, Value x, const std::vector<int64_t>& axes, double eps) {
  auto& g = c.g();
  const DType dt = g.shape(x).dtype;
  Value mean = g.mean(x, axes, true);
  Value d = g.sub(x, mean);
  Value var = g.mean(g.mul(d, d), axes, true);
  Value inv = g.act(ActKind::Rsqrt, g.add(var, c.scalar_like(eps, dt)));
  return {mean, d, inv};
}

// Training-mode BatchNormalization: batch statistics, plus the updated running mean/var.
V batch_norm_training(const NodeCtx& c) {
  auto& g = c.g();
  const Shape& xs = c.shape(0);
  if (xs.rank() < 2) c.fail("X must have rank >= 2 (N, C, ...), got " + xs.str());
  const DType dt = xs.dtype;
  std::vector<int64_t> axes{0};
  for (int64_t i = 2; i < xs.rank(); ++i) axes.push_back(i);
  std::vector<Dim> cshape(static_cast<size_t>(xs.rank()), Dim(1));
  cshape[1] = xs.dims[1];
  auto per_channel = [&](Value v) { return g.reshape(v, cshape); };
  Value x = c.value(0);
  const double eps = c.f("epsilon", 1e-5), momentum = c.f("momentum", 0.9);
  Moments m = moments(c, x, axes, eps);
  Value y = g.add(g.mul(g.mul(m.centered, m.inv_std), per_channel(c.value(1))), per_channel(c.value(2)));
  V outs{c.out(y)};
  if (c.num_outputs() > 1) {
    Value mean = g.reshape(m.mean, {xs.dims[1]});
    Value var = g.reshape(g.mean(g.mul(m.centered, m.centered), axes, true), {xs.dims[1]});
    auto blend = [&](Value running, Value current) {
      return g.add(g.mul(running, c.scalar_like(momentum, dt)), g.mul(current, c.scalar_like(1 - momentum, dt)));
    };
    outs.push_back(c.out(blend(c.value(3), mean)));
    if (c.num_outputs() > 2) outs.push_back(c.out(blend(c.value(4), var)));
  }
  return outs;
}

V batch_norm(const NodeCtx& c) {
  c.allow_only({"epsilon", "momentum", "training_mode", "spatial", "is_test", "consumed_inputs"});
  if (c.i("training_mode", 0) != 0) return batch_norm_training(c);
  if (c.i("spatial", 1) != 1) c.fail("spatial=0 is not supported");
  if (c.shape(0).rank() < 2) c.fail("X must have rank >= 2 (N, C, ...), got " + c.shape(0).str());
  for (size_t i = 1; i <= 4; ++i)
    if (c.shape(i).rank() != 1 || c.shape(i).dims[0] != c.shape(0).dims[1])
      c.fail("input " + std::to_string(i) + " must be 1-d with one entry per channel (" + c.shape(0).dims[1].str() +
             "), got " + c.shape(i).str());
  for (size_t i = 1; i < c.num_outputs(); ++i)
    if (!c.node().output(static_cast<int>(i)).empty()) c.fail("the training outputs (running mean/var) are not supported");
  ops::BatchNormInference op{c.f("epsilon", 1e-5)};
  return {c.out(c.g().apply(op, {c.value(0), c.value(1), c.value(2), c.value(3), c.value(4)}))};
}

V layer_norm(const NodeCtx& c) {
  c.allow_only({"axis", "epsilon", "stash_type"});
  auto& g = c.g();
  const int64_t r = c.shape(0).rank();
  const int64_t axis = normalize_axis(c.i("axis", -1), r, "LayerNormalization axis");
  const double eps = c.f("epsilon", 1e-5);
  const std::vector<Dim> tail(c.shape(0).dims.begin() + axis, c.shape(0).dims.end());
  const bool plain = c.num_outputs() == 1 && c.shape(1).dims == tail && (!c.present(2) || c.shape(2).dims == tail);
  if (plain) {
    std::optional<Value> beta;
    if (c.present(2)) beta = c.value(2);
    return {c.out(g.layer_norm(c.value(0), c.value(1), beta, eps, axis))};
  }
  Value x = c.value(0);
  const DType dt = c.shape(0).dtype;
  const DType stash = c.i("stash_type", 1) == 1 && dt != DType::F64 ? DType::F32 : dt;
  Value xs = c.cast_to(x, stash);
  std::vector<int64_t> axes;
  for (int64_t i = axis; i < r; ++i) axes.push_back(i);
  Moments m = moments(c, xs, axes, eps);
  Value y = c.cast_to(g.mul(m.centered, m.inv_std), dt);
  y = g.mul(y, c.value(1));
  if (c.present(2)) y = g.add(y, c.value(2));
  V outs{c.out(y)};
  if (c.num_outputs() > 1) outs.push_back(c.out(m.mean));
  if (c.num_outputs() > 2) outs.push_back(c.out(m.inv_std));
  return outs;
}

V rms_norm(const NodeCtx& c) {
  c.allow_only({"axis", "epsilon", "stash_type"});
  auto& g = c.g();
  const int64_t r = c.shape(0).rank();
  const int64_t axis = normalize_axis(c.i("axis", -1), r, "RMSNormalization axis");
  const double eps = c.f("epsilon", 1e-5);
  const std::vector<Dim> tail(c.shape(0).dims.begin() + axis, c.shape(0).dims.end());
  if (c.shape(1).dims == tail) return {c.out(g.rms_norm(c.value(0), c.value(1), std::nullopt, eps, axis))};
  const DType dt = c.shape(0).dtype;
  const DType stash = c.i("stash_type", 1) == 1 && dt != DType::F64 ? DType::F32 : dt;
  Value x = c.cast_to(c.value(0), stash);
  std::vector<int64_t> axes;
  for (int64_t i = axis; i < r; ++i) axes.push_back(i);
  Value ms = g.mean(g.mul(x, x), axes, true);
  Value y = g.mul(x, g.act(ActKind::Rsqrt, g.add(ms, c.scalar_like(eps, stash))));
  return {c.out(g.mul(c.cast_to(y, dt), c.value(1)))};
}

V group_norm(const NodeCtx& c, bool instance) {
  if (instance) c.allow_only({"epsilon"});
  else c.allow_only({"epsilon", "num_groups", "stash_type"});
  auto& g = c.g();
  const Shape& xs = c.shape(0);
  if (xs.rank() < 3) c.fail("needs (N, C, ...) input");
  const Dim& C = xs.dims[1];
  if (C.is_symbolic()) c.fail("symbolic channel dim");
  const int64_t groups = instance ? C.value : c.i("num_groups", 0);
  if (groups <= 0 || C.value % groups != 0) c.fail("num_groups must divide the channels");
  Value scale = c.value(1), bias = c.value(2);
  if (!instance && c.shape(1).dims == std::vector<Dim>{Dim(groups)} && groups != C.value) {
    // opset 18: per-group scale/bias -> per channel
    std::vector<int64_t> idx(static_cast<size_t>(C.value));
    for (int64_t i = 0; i < C.value; ++i) idx[static_cast<size_t>(i)] = i / (C.value / groups);
    Value ix = g.constant(Tensor::i64({C.value}, idx));
    scale = g.gather(scale, ix, 0);
    bias = g.gather(bias, ix, 0);
  }
  ops::GroupNorm op{groups, c.f("epsilon", 1e-5)};
  return {c.out(g.apply(op, {c.value(0), scale, bias}))};
}

V lp_norm(const NodeCtx& c) {
  c.allow_only({"axis", "p"});
  auto& g = c.g();
  Value x = c.value(0);
  const int64_t p = c.i("p", 2);
  const int64_t axis = normalize_axis(c.i("axis", -1), c.shape(0).rank(), "LpNormalization axis");
  Value n;
  if (p == 1) n = g.sum(g.act(ActKind::Abs, x), {axis}, true);
  else if (p == 2) n = g.act(ActKind::Sqrt, g.sum(g.mul(x, x), {axis}, true));
  else c.fail("p must be 1 or 2");
  Value zero = c.scalar_like(0.0, c.shape(0).dtype);
  return {c.out(g.where(g.compare(CompareKind::Eq, n, zero), zero, g.div(x, n)))};
}

V mvn(const NodeCtx& c) {
  c.allow_only({"axes"});
  auto& g = c.g();
  const auto axes = c.ints("axes", {0, 2, 3});
  for (int64_t a : axes) normalize_axis(a, c.shape(0).rank(), "MeanVarianceNormalization axes");
  Moments m = moments(c, c.value(0), axes, 1e-9);
  (void)m.mean;
  Value var = g.mean(g.mul(m.centered, m.centered), axes, true);
  return {c.out(g.div(m.centered, g.add(g.act(ActKind::Sqrt, var), c.scalar_like(1e-9, c.shape(0).dtype))))};
}

V lrn(const NodeCtx& c) {
  c.allow_only({"alpha", "beta", "bias", "size"});
  auto& g = c.g();
  const Shape& xs = c.shape(0);
  if (!xs.is_static() || xs.rank() < 3) c.fail("needs a static (N, C, ...) input");
  const auto d = xs.concrete();
  const int64_t size = c.i("size", 0);
  if (size <= 0) c.fail("size must be positive");
  const int64_t rest = std::accumulate(d.begin() + 2, d.end(), int64_t{1}, std::multiplies<>());
  const DType dt = xs.dtype;
  Value x = c.value(0);
  Value sq = g.reshape(g.mul(x, x), {d[0], 1, d[1], rest});
  ops::Pool p{PoolKind::Avg, {size, 1}, {1, 1}, {(size - 1) / 2, 0, size - 1 - (size - 1) / 2, 0}, {1, 1}, true, false};
  Value s = g.mul(g.apply(p, {sq}), c.scalar_like(static_cast<double>(size), dt));
  std::vector<Dim> back(xs.dims.begin(), xs.dims.end());
  s = g.reshape(s, back);
  Value den = g.add(c.scalar_like(c.f("bias", 1.0), dt), g.mul(s, c.scalar_like(c.f("alpha", 1e-4) / static_cast<double>(size), dt)));
  return {c.out(g.div(x, g.pow(den, c.scalar_like(c.f("beta", 0.75), dt))))};
}

// Attention (opset 23+), decomposed like the operator's reference definition.
V attention(const NodeCtx& c) {
  c.allow_only({"is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode", "scale", "softcap",
                "softmax_precision"});
  if (c.present(4) != c.present(5)) c.fail("past_key and past_value must be given together");
  auto& g = c.g();
  const Shape& qs = c.shape(0);
  const DType dt = qs.dtype;
  if (qs.rank() != 3 && qs.rank() != 4) c.fail("Q must be 3-d (B, S, hidden) or 4-d (B, heads, S, D), got " + qs.str());
  for (size_t i : {size_t{1}, size_t{2}})
    if (c.shape(i).rank() != qs.rank())
      c.fail(std::string(i == 1 ? "K" : "V") + " (input " + std::to_string(i) + ") must have Q's rank " +
             std::to_string(qs.rank()) + ", got " + c.shape(i).str());
  for (size_t i : {size_t{4}, size_t{5}})
    if (c.present(i) && c.shape(i).rank() != 4)
      c.fail(std::string(i == 4 ? "past_key" : "past_value") + " (input " + std::to_string(i) +
             ") must be 4-d (B, kv_heads, past, D), got " + c.shape(i).str());
  if (c.present(3) && (c.shape(3).rank() < 2 || c.shape(3).rank() > 4))
    c.fail("attn_mask (input 3) must have rank 2 to 4 (broadcastable to (B, heads, Sq, Skv)), got " + c.shape(3).str());
  if (c.present(6) && c.shape(6).rank() != 1)
    c.fail("nonpad_kv_seqlen (input 6) must be 1-d (B), got " + c.shape(6).str());
  if (c.present(6) && !is_int(c.shape(6).dtype))
    c.fail("nonpad_kv_seqlen (input 6) must be an integer tensor, got " + c.shape(6).str());
  const bool three_d = qs.rank() == 3;
  Value q = c.value(0), k = c.value(1), v = c.value(2);
  auto to4 = [&](Value t, int64_t heads, const char* what) {
    const auto& d = g.shape(t).dims;
    if (heads <= 0) c.fail(std::string("3-d inputs need the ") + what + " attribute");
    if (d[2].is_symbolic() || d[2].value % heads != 0) c.fail("hidden size does not split into heads");
    Value r = g.reshape(t, {d[0], d[1], Dim(heads), Dim(d[2].value / heads)});
    return g.transpose(r, {0, 2, 1, 3});
  };
  if (three_d) {
    q = to4(q, c.i("q_num_heads", 0), "q_num_heads");
    k = to4(k, c.i("kv_num_heads", 0), "kv_num_heads");
    v = to4(v, c.i("kv_num_heads", 0), "kv_num_heads");
  }
  for (Value t : {q, k, v})
    if (g.shape(t).rank() != 4) c.fail("Q, K and V must all be 3-d or all 4-d");
  if (c.present(4)) k = g.concat({c.value(4), k}, 2);
  if (c.present(5)) v = g.concat({c.value(5), v}, 2);
  const Value present_k = k, present_v = v;
  const auto qd = g.shape(q).dims, kd = g.shape(k).dims, vd = g.shape(v).dims;
  for (const auto* d : {&qd, &kd, &vd})
    for (const Dim& x : *d)
      if (x.is_symbolic()) c.fail("needs static shapes");
  const int64_t B = qd[0].value, Hq = qd[1].value, Sq = qd[2].value, D = qd[3].value;
  const int64_t Hkv = kd[1].value, Skv = kd[2].value, Dv = vd[3].value;
  if (Hkv <= 0 || Hq % Hkv != 0) c.fail("q heads must be a multiple of kv heads");
  if (kd[0].value != B || vd[0].value != B || vd[1].value != Hkv || vd[2].value != Skv || kd[3].value != D)
    c.fail("inconsistent shapes (as 4-d, with any past prepended): Q " + dims_str(qd) + ", K " + dims_str(kd) +
           ", V " + dims_str(vd) + "; K must be (B, kv_heads, Skv, D) and V (B, kv_heads, Skv, Dv)");
  if (c.present(6) && c.shape(6).dims[0] != Dim(B))
    c.fail("nonpad_kv_seqlen must have one entry per batch (" + std::to_string(B) + "), got " + c.shape(6).str());
  const int64_t rep = Hq / Hkv;
  if (rep > 1) {  // GQA: repeat each kv head
    auto repeat = [&](Value t, int64_t dim) {
      Value r = g.reshape(t, {B, Hkv, 1, Skv, dim});
      r = g.expand(r, {B, Hkv, rep, Skv, dim});
      return g.reshape(r, {B, Hq, Skv, dim});
    };
    k = repeat(k, D);
    v = repeat(v, Dv);
  }
  const double scale = c.has("scale") ? c.f("scale", 1.0) : 1.0 / std::sqrt(static_cast<double>(D));
  // Scale q and k by sqrt(scale) each, as the operator's definition does.
  Value sq = c.scalar_like(std::sqrt(scale), dt);
  Value s = g.matmul(g.mul(q, sq), g.transpose(g.mul(k, sq), {0, 1, 3, 2}));
  // Softcap comes before the mask so that masked scores stay -inf.
  const double softcap = c.f("softcap", 0.0);
  if (softcap > 0) s = g.mul(g.tanh(g.div(s, c.scalar_like(softcap, dt))), c.scalar_like(softcap, dt));
  const int64_t mode = c.i("qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3) c.fail("qk_matmul_output_mode " + std::to_string(mode) + " is not one of 0, 1, 2, 3");
  if (softcap < 0 || !std::isfinite(softcap)) c.fail("softcap must be a finite value >= 0");
  if (!std::isfinite(scale)) c.fail("scale must be finite");
  std::optional<Value> qk_out;
  if (mode == 0 || mode == 1) qk_out = s;
  const double ninf = -std::numeric_limits<double>::infinity();
  auto additive = [&](Value keep) { return g.where(keep, c.scalar_like(0.0, dt), c.scalar_like(ninf, dt)); };
  // The additive bias: the given mask (bool keep or additive, padded to Skv), the causal
  // frontier (query i sees keys j <= i + offset) and the key padding of nonpad_kv_seqlen.
  std::optional<Value> bias;
  if (c.present(3)) {
    Value m = c.value(3);
    m = g.shape(m).dtype == DType::Bool ? additive(m) : c.cast_to(m, dt);
    const auto md = g.shape(m).dims;
    const Dim& last = md.back();
    if (last.is_symbolic() || last.value > Skv) c.fail("attn_mask is longer than the key sequence");
    if (last.value < Skv) {
      ops::Pad pad;
      pad.pads.assign(2 * md.size(), 0);
      pad.pads.back() = Skv - last.value;
      pad.value = ninf;
      m = g.apply(pad, {m});
    }
    bias = m;
  }
  std::optional<Value> nonpad;
  if (c.present(6)) nonpad = g.reshape(c.cast_to(c.value(6), DType::I64), {B, 1, 1});
  if (c.i("is_causal", 0) != 0) {
    std::vector<int64_t> iv(static_cast<size_t>(Sq)), jv(static_cast<size_t>(Skv));
    std::iota(iv.begin(), iv.end(), 0);
    std::iota(jv.begin(), jv.end(), 0);
    Value i_idx = g.constant(Tensor::i64({1, Sq, 1}, iv));
    Value j_idx = g.constant(Tensor::i64({1, 1, Skv}, jv));
    Value frontier;
    if (!c.present(4) && nonpad) {  // per-batch offset nonpad - Sq
      frontier = g.add(i_idx, g.sub(*nonpad, g.constant(Tensor::scalar_i64(Sq))));
    } else {
      const int64_t past = c.present(4) ? c.shape(4).dims[2].value : 0;
      frontier = g.add(i_idx, g.constant(Tensor::scalar_i64(past)));
    }
    Value causal = additive(g.compare(CompareKind::Le, j_idx, frontier));  // (B or 1, Sq, Skv)
    const auto cd = g.shape(causal).dims;
    causal = g.reshape(causal, {cd[0], 1, cd[1], cd[2]});
    bias = bias ? g.add(*bias, causal) : causal;
  }
  if (nonpad) {
    std::vector<int64_t> jv(static_cast<size_t>(Skv));
    std::iota(jv.begin(), jv.end(), 0);
    Value valid = g.compare(CompareKind::Lt, g.constant(Tensor::i64({1, 1, Skv}, jv)), *nonpad);
    Value pm = g.reshape(additive(valid), {B, 1, 1, Skv});
    bias = bias ? g.add(*bias, pm) : pm;
  }
  if (bias) s = g.add(s, *bias);
  if (mode == 2) qk_out = s;
  // softmax_precision: the softmax runs in that float type.
  const DType sp = c.has("softmax_precision")
                       ? dtype_from_onnx(static_cast<int32_t>(c.i("softmax_precision", 1)), c.where())
                       : dt;
  if (!is_float(sp)) c.fail("softmax_precision must be a float type");
  Value p = c.cast_to(g.softmax(c.cast_to(s, sp), -1), dt);
  // A row whose every key is masked gives 0 (not NaN), as the operator's tests expect.
  if (bias) p = g.where(g.compare(CompareKind::Ne, p, p), c.scalar_like(0.0, dt), p);
  if (mode == 3) qk_out = p;
  Value y = g.matmul(p, v);
  if (three_d) y = g.reshape(g.transpose(y, {0, 2, 1, 3}), {B, Sq, Hq * Dv});
  V outs{c.out(y)};
  if (c.num_outputs() > 1) outs.push_back(c.out(present_k));
  if (c.num_outputs() > 2) outs.push_back(c.out(present_v));
  if (c.num_outputs() > 3) {
    if (!qk_out) c.fail("qk_matmul_output_mode " + std::to_string(mode) + " is not supported");
    outs.push_back(c.out(*qk_out));
  }
  return outs;
}

// Einsum with one or two operands, one letter per axis (no "..." and no repeated letters in
// an operand): sums, transposes, and a DotGeneral for two operands.
V einsum(const NodeCtx& c) {
  c.allow_only({"equation"});
  auto& g = c.g();
  std::string eq;
  for (char ch : c.s("equation", "")) if (ch != ' ') eq += ch;
  if (eq.find("...") != std::string::npos) c.fail("ellipsis ('...') equations are not supported");
  const auto arrow = eq.find("->");
  std::vector<std::string> ins;
  {
    const std::string lhs = eq.substr(0, arrow);
    size_t start = 0;
    for (size_t i = 0; i <= lhs.size(); ++i)
      if (i == lhs.size() || lhs[i] == ',') {
        ins.push_back(lhs.substr(start, i - start));
        start = i + 1;
      }
  }
  if (ins.size() != c.num_inputs() || ins.empty() || ins.size() > 2)
    c.fail("equation '" + eq + "' must name one or two operands matching the inputs");
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
  } else {  // implicit: letters used once, in alphabetical order
    std::map<char, int> count;
    for (const auto& t : ins) for (char ch : t) ++count[ch];
    for (const auto& [ch, n] : count) if (n == 1) out += ch;
  }
  for (size_t i = 0; i < ins.size(); ++i) {
    if (static_cast<int64_t>(ins[i].size()) != c.shape(i).rank())
      c.fail("operand " + std::to_string(i) + " '" + ins[i] + "' does not match rank " + std::to_string(c.shape(i).rank()));
    for (size_t a = 0; a < ins[i].size(); ++a)
      if (ins[i].find(ins[i][a]) != a) c.fail("repeated letters in an operand (diagonals) are not supported");
  }
  // Sums away the axes of `t` (letters `l`) that appear neither in `other` nor in the output.
  auto reduce_unused = [&](Value v, std::string& l, const std::string& other) {
    std::vector<int64_t> axes;
    std::string kept;
    for (size_t a = 0; a < l.size(); ++a) {
      if (out.find(l[a]) == std::string::npos && other.find(l[a]) == std::string::npos) axes.push_back(static_cast<int64_t>(a));
      else kept += l[a];
    }
    l = kept;
    return axes.empty() ? v : g.sum(v, axes, false);
  };
  std::string l0 = ins[0], l1 = ins.size() > 1 ? ins[1] : "";
  Value v = reduce_unused(c.value(0), l0, l1);
  std::string have = l0;
  if (ins.size() == 2) {
    Value w = reduce_unused(c.value(1), l1, l0);
    ops::DotGeneral dg;
    std::string batch, lfree, rfree;
    for (size_t a = 0; a < l0.size(); ++a) {
      const auto b = l1.find(l0[a]);
      if (b == std::string::npos) lfree += l0[a];
      else if (out.find(l0[a]) != std::string::npos) {
        dg.lhs_batch.push_back(static_cast<int64_t>(a));
        dg.rhs_batch.push_back(static_cast<int64_t>(b));
        batch += l0[a];
      } else {
        dg.lhs_contract.push_back(static_cast<int64_t>(a));
        dg.rhs_contract.push_back(static_cast<int64_t>(b));
      }
    }
    for (char ch : l1) if (l0.find(ch) == std::string::npos) rfree += ch;
    v = g.dot_general(v, w, dg);
    have = batch + lfree + rfree;
  }
  if (have.size() != out.size()) c.fail("output '" + out + "' names letters the operands do not have");
  std::vector<int64_t> perm;
  for (char ch : out) {
    const auto a = have.find(ch);
    if (a == std::string::npos) c.fail("output letter '" + std::string(1, ch) + "' is not in the operands");
    perm.push_back(static_cast<int64_t>(a));
  }
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int64_t>(i);
  if (identity && ins.size() == 1 && have == ins[0]) v = g.expand(v, g.shape(v).dims);  // a fresh value
  return {c.out(identity ? v : g.transpose(v, perm))};
}

}  // namespace

void register_nn(ConverterTable& t) {
  t["MatMul"] = matmul;
  t["Gemm"] = gemm;
  t["Conv"] = conv;
  t["ConvTranspose"] = conv_transpose;
  t["MaxPool"] = pool(PoolKind::Max);
  t["AveragePool"] = pool(PoolKind::Avg);
  t["LpPool"] = lp_pool;
  t["GlobalAveragePool"] = global_pool(ReduceKind::Mean);
  t["GlobalMaxPool"] = global_pool(ReduceKind::Max);
  t["BatchNormalization"] = batch_norm;
  t["LayerNormalization"] = layer_norm;
  t["RMSNormalization"] = rms_norm;
  t["GroupNormalization"] = [](const NodeCtx& c) { return group_norm(c, false); };
  t["InstanceNormalization"] = [](const NodeCtx& c) { return group_norm(c, true); };
  t["LpNormalization"] = lp_norm;
  t["MeanVarianceNormalization"] = mvn;
  t["LRN"] = lrn;
  t["Attention"] = attention;
  t["Einsum"] = einsum;
}

}  // namespace rlx::onnx_io
