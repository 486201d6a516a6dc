#include "plan/spatial_work.h"

#include <algorithm>
#include <cstring>

#include "plan/gpu_claims.h"
#include "rlx/error.h"

namespace rlx::plan {
namespace {

constexpr int64_t kMaxIndex = INT32_MAX;

std::vector<int64_t> spatial(const std::vector<int64_t>& dims) { return {dims.begin() + 2, dims.end()}; }

Window3 lift(const std::vector<int64_t>& in_sp, const std::vector<int64_t>& out_sp, const std::vector<int64_t>& kernel,
             const std::vector<int64_t>& stride, const std::vector<int64_t>& pads, const std::vector<int64_t>& dilation) {
  Window3 w;
  const size_t nd = in_sp.size();
  if (nd < 1 || nd > 3 || out_sp.size() != nd || kernel.size() != nd)
    throw Error("spatial window: internal: " + std::to_string(nd) + " spatial dims (1 to 3, one kernel size each)");
  const size_t shift = 3 - nd;
  for (size_t i = 0; i < nd; ++i) {
    w.in[shift + i] = in_sp[i];
    w.out[shift + i] = out_sp[i];
    w.k[shift + i] = kernel[i];
    w.stride[shift + i] = stride.empty() ? 1 : stride.at(i);
    w.pad[shift + i] = pads.empty() ? 0 : pads.at(i);
    w.pad_end[shift + i] = pads.empty() ? 0 : pads.at(nd + i);
    w.dil[shift + i] = dilation.empty() ? 1 : dilation.at(i);
  }
  return w;
}

uint32_t bits(int64_t v) { return static_cast<uint32_t>(static_cast<int32_t>(v)); }

void push3(std::vector<uint32_t>& p, const std::array<int64_t, 3>& a) {
  for (int64_t v : a) p.push_back(bits(v));
}

}  // namespace

void spatial_index_check(const Step& st, std::string_view backend, int64_t extra) {
  int64_t most = extra;
  for (const auto& r : st.in) most = std::max(most, r.numel());
  for (const auto& r : st.out) most = std::max(most, r.numel());
  if (most > kMaxIndex)
    throw Error(step_node_label(st) + ": the " + std::string(backend) +
                " spatial kernels index with 32 bits; an operand has " + std::to_string(most) +
                " elements (2^31 or more): split the batch or run it on the CPU/CUDA backend");
}

std::vector<uint32_t> ConvWork::params() const {
  std::vector<uint32_t> p;
  for (int64_t v : {n, cin, cg, cout, coutg, groups}) p.push_back(bits(v));
  for (const auto* a : {&win.in, &win.out, &win.k, &win.stride, &win.pad, &win.dil}) push3(p, *a);
  return p;
}

std::array<int64_t, 3> ConvWork::gemm_tiles() const {
  const int64_t cols = n * win.out[0] * win.out[1] * win.out[2], bm = 16 * int64_t{tm};
  return {std::max<int64_t>(1, (cols + 63) / 64), std::max<int64_t>(1, (coutg + bm - 1) / bm), std::max<int64_t>(1, groups)};
}

ConvWork conv_work(const Step& st, std::string_view backend) {
  ConvWork c;
  const TensorRef &x = st.in.at(0), &w = st.in.at(1), &y = st.out.at(0);
  c.bias = st.in.size() > 2;
  const std::vector<int64_t>&xd = x.dims, &wd = w.dims, &yd = y.dims;
  if (xd.size() < 3 || wd.size() != xd.size() || yd.size() != xd.size())
    throw Error(step_node_label(st) + ": conv operands of ranks " + std::to_string(xd.size()) + ", " +
                std::to_string(wd.size()) + ", " + std::to_string(yd.size()) + " (x, w and y of one rank >= 3)");
  if (const auto* op = std::get_if<ops::Conv>(&st.op)) {
    c.groups = op->groups;
    c.cg = wd[1];
    c.coutg = wd[0] / std::max<int64_t>(1, c.groups);
    c.win = lift(spatial(xd), spatial(yd), spatial(wd), op->stride, op->pads, op->dilation);
  } else {
    const auto& opt = std::get<ops::ConvTranspose>(st.op);
    c.transposed = true;
    c.groups = opt.groups;
    c.cg = xd[1] / std::max<int64_t>(1, c.groups);
    c.coutg = wd[1];
    c.win = lift(spatial(xd), spatial(yd), spatial(wd), opt.stride, opt.pads, opt.dilation);
  }
  if (c.groups < 1) throw Error(step_node_label(st) + ": conv groups " + std::to_string(c.groups) + " (>= 1)");
  const int64_t ks = c.win.k[0] * c.win.k[1] * c.win.k[2];
  spatial_index_check(st, backend, c.cg * ks);
  c.n = xd[0];
  c.cin = xd[1];
  c.cout = yd[1];
  c.gemm = c.coutg >= 8;
  c.tm = c.coutg >= 48 ? 4 : c.coutg >= 24 ? 2 : 1;
  return c;
}

std::vector<uint32_t> PoolWork::params() const {
  std::vector<uint32_t> p{bits(planes)};
  for (const auto* a : {&win.in, &win.out, &win.k, &win.stride, &win.pad, &win.pad_end, &win.dil}) push3(p, *a);
  return p;
}

PoolWork pool_work(const Step& st, std::string_view backend) {
  const auto& op = std::get<ops::Pool>(st.op);
  const TensorRef &x = st.in.at(0), &y = st.out.at(0);
  spatial_index_check(st, backend);
  if (x.dims.size() < 3 || x.dims.size() != y.dims.size())
    throw Error(step_node_label(st) + ": pool of rank " + std::to_string(x.dims.size()) + " (3 to 5)");
  PoolWork p;
  p.win = lift(spatial(x.dims), spatial(y.dims), op.kernel, op.stride, op.pads, op.dilation);
  p.planes = x.dims[0] * x.dims[1];
  p.is_max = op.kind == PoolKind::Max;
  p.count_pad = op.count_include_pad;
  return p;
}

ResizeWork resize_work(const Step& st, bool f64_weights, std::string_view backend) {
  const auto& op = std::get<ops::Resize>(st.op);
  const TensorRef &x = st.in.at(0), &y = st.out.at(0);
  spatial_index_check(st, backend);
  ResizeWork r;
  r.linear = op.mode == ResizeMode::Linear;
  r.rank = static_cast<int>(x.dims.size());
  const bool wide = f64_weights && r.linear;
  r.entry_words = wide ? 4 : 3;
  for (int a = 0; a < r.rank; ++a) {
    const ResizeAxisTable tab = resize_axis_table(op, a, x.dims[static_cast<size_t>(a)], y.dims[static_cast<size_t>(a)]);
    for (size_t o = 0; o < tab.lo.size(); ++o) {
      r.table.push_back(bits(tab.lo[o]));
      r.table.push_back(bits(tab.hi[o]));
      if (wide) {
        uint64_t u;
        std::memcpy(&u, &tab.w[o], 8);
        r.table.push_back(static_cast<uint32_t>(u));
        r.table.push_back(static_cast<uint32_t>(u >> 32));
      } else {
        const float wf = static_cast<float>(tab.w[o]);
        uint32_t u;
        std::memcpy(&u, &wf, 4);
        r.table.push_back(u);
      }
    }
  }
  if (r.table.size() > static_cast<size_t>(kMaxIndex))
    throw Error(step_node_label(st) + ": the " + std::string(backend) + " resize table does not fit 32-bit indices");
  r.params.push_back(bits(y.numel()));
  for (int64_t d : y.dims) r.params.push_back(bits(d));
  std::vector<uint32_t> xs(x.dims.size());
  int64_t stride = 1;
  for (size_t a = x.dims.size(); a-- > 0;) {
    xs[a] = bits(stride);
    stride *= x.dims[a];
  }
  r.params.insert(r.params.end(), xs.begin(), xs.end());
  return r;
}

Im2ColWork im2col_work(const Step& st, std::string_view backend) {
  const auto& op = std::get<ops::Im2Col>(st.op);
  const TensorRef &x = st.in.at(0), &y = st.out.at(0);
  spatial_index_check(st, backend);
  if (x.dims.size() != 4 || y.dims.size() != 3 || op.kernel.size() != 2)
    throw Error(step_node_label(st) + ": im2col takes x (N, C, H, W) and a 2-d kernel");
  const int64_t h = x.dims[2], wdt = x.dims[3];
  const int64_t s0 = op.stride.empty() ? 1 : op.stride[0], s1 = op.stride.empty() ? 1 : op.stride[1];
  const int64_t d0 = op.dilation.empty() ? 1 : op.dilation[0], d1 = op.dilation.empty() ? 1 : op.dilation[1];
  const int64_t p0 = op.pads.empty() ? 0 : op.pads[0], p1 = op.pads.empty() ? 0 : op.pads[1];
  const int64_t e0 = op.pads.empty() ? 0 : op.pads[2], e1 = op.pads.empty() ? 0 : op.pads[3];
  const int64_t oh = (h + p0 + e0 - d0 * (op.kernel[0] - 1) - 1) / s0 + 1;
  const int64_t ow = (wdt + p1 + e1 - d1 * (op.kernel[1] - 1) - 1) / s1 + 1;
  if (oh * ow != y.dims[2])
    throw Error(step_node_label(st) + ": im2col output " + std::to_string(y.dims[2]) + " positions do not match the " +
                std::to_string(oh) + "x" + std::to_string(ow) + " windows of its attributes");
  Im2ColWork w;
  for (int64_t v : {y.numel(), h, wdt, oh, ow, op.kernel[0], op.kernel[1], s0, s1, p0, p1, d0, d1})
    w.params.push_back(bits(v));
  return w;
}

bool spatial_claims_kind(std::string_view name) {
  return name == "conv" || name == "conv_transpose" || name == "pool" || name == "resize" || name == "im2col";
}

bool spatial_claims_node(std::string_view backend, const Graph& g, const Node& n, std::string* why) {
  const std::string be(backend);
  const std::string name = op_name(n.op);
  const DType t = g.shape(n.inputs.at(0)).dtype;
  for (const Value& v : n.inputs)
    if (g.shape(v).dtype != t && name != "resize")
      return claim_refuse(why, "the " + be + " " + name + " kernel needs every operand in x's dtype");
  if (std::holds_alternative<ops::Conv>(n.op) || std::holds_alternative<ops::ConvTranspose>(n.op)) {
    if (!is_float(t))
      return claim_refuse(why, "the " + be + " " + name + " kernel computes f32, f16, bf16 or f64, got " + dtype_name(t));
    const int64_t rank = g.shape(n.inputs[0]).rank();
    if (std::holds_alternative<ops::ConvTranspose>(n.op) && rank != 4)
      return claim_refuse(why, "the " + be + " conv_transpose kernel is 2-d (rank-4 x)");
    if (rank < 3 || rank > 5) return claim_refuse(why, "the " + be + " conv kernel takes 1..3 spatial dims");
    return true;
  }
  if (const auto* p = std::get_if<ops::Pool>(&n.op)) {
    if (p->kind == PoolKind::Avg && !is_float(t))
      return claim_refuse(why, "the " + be + " average pool computes float tensors, got " + std::string(dtype_name(t)));
    if (p->kind == PoolKind::Max && !is_float(t) && !is_int(t))
      return claim_refuse(why, "the " + be + " max pool computes float and integer tensors, got " + std::string(dtype_name(t)));
    if (p->kind != PoolKind::Max && p->kind != PoolKind::Avg) return claim_refuse(why, "the " + be + " pool has no such kind");
    const int64_t rank = g.shape(n.inputs[0]).rank();
    if (rank < 3 || rank > 5) return claim_refuse(why, "the " + be + " pool kernel takes 1..3 spatial dims");
    return true;
  }
  if (const auto* r = std::get_if<ops::Resize>(&n.op)) {
    if (r->mode != ResizeMode::Nearest && r->mode != ResizeMode::Linear)
      return claim_refuse(why, "the " + be + " resize kernel has no such mode");
    if (r->mode == ResizeMode::Linear && !is_float(t))
      return claim_refuse(why, "the " + be + " linear resize computes float tensors, got " + std::string(dtype_name(t)));
    // Coordinate transforms and nearest roundings come from plan::resize_axis_table (the CPU's).
    return true;
  }
  if (std::holds_alternative<ops::Im2Col>(n.op)) return true;  // a copy of any dtype
  return claim_refuse(why, "the " + be + " spatial family has no kernel for '" + name + "'");
}

}  // namespace rlx::plan
