// Rope on WebGPU: rotary position embedding over x (batch, seq, heads, head_dim) with cos/sin
// tables of n_rot / 2 columns per position (or per batch and position), NeoX (half split) or
// GPT-J (interleaved) pairs, partial rotation (the head_dim - n_rot tail copied). One kernel per
// dtype of x (f32, f16, bf16: f32 words, results rounded to x's precision); every size and
// attribute is a uniform parameter.
#include "backends/webgpu/lower.h"
#include "codegen/language.h"
#include "rlx/error.h"

namespace rlx::webgpu {
namespace {

constexpr uint64_t kWorkgroup = 256;

bool wgsl_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

bool kind(std::string_view name) { return name == "rope"; }

bool node(const Graph& g, const Node& n, const DeviceInfo*, std::string* why) {
  const auto* op = std::get_if<ops::Rope>(&n.op);
  if (!op) return refuse(why, "not a rope node");
  for (size_t i = 0; i < 3; ++i) {
    const DType t = g.shape(n.inputs.at(i)).dtype;
    if (!wgsl_float(t))
      return refuse(why, std::string("WebGPU rope takes x, cos and sin in f32, f16 or bf16, got ") + dtype_name(t));
  }
  if (op->n_rot <= 0 || op->n_rot % 2 != 0 || op->n_rot > op->head_dim)
    return refuse(why, "WebGPU rope needs an even n_rot in (0, head_dim], got n_rot " + std::to_string(op->n_rot) +
                           " for head_dim " + std::to_string(op->head_dim));
  const Shape& x = g.shape(n.inputs.at(0));
  if (x.is_static() && x.numel() > INT32_MAX)
    return refuse(why, "the WebGPU rope kernel indexes with 32 bits; x has " + std::to_string(x.numel()) + " elements");
  return true;
}

uint32_t u32(int64_t v, const std::string& what) {
  if (v < 0 || v > INT32_MAX)
    throw Error(what + ": the WebGPU rope kernel indexes with 32 bits; " + std::to_string(v) +
                " elements (2^31 or more) is too many: split the batch or use the CUDA/CPU backend");
  return static_cast<uint32_t>(v);
}

// Each head row has `half` rotated pairs, then head_dim - n_rot words copied as they are; one
// invocation per pair or copied word. Pair p is (p, p + half) in the NeoX style, (2p, 2p + 1) in
// the GPT-J style; with the pair's c and s the first becomes x1 c - x2 s and the second
// x2 c + x1 s, computed in f32 (as the CPU computes f16 / bf16) and rounded to x's dtype.
// Two tensors of the same tables and layout but their head counts (a decode's q and k) go in one
// dispatch: invocations below total0 take x0, the others x1 (total1 = 0: one tensor).
const char* kRopeBody = R"(
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let half_rot = rlx_p.half_rot;
  let total = rlx_p.total0 + rlx_p.total1;
  for (var i = gid.x; i < total; i += nwg.x * 256u) {
    let second = i >= rlx_p.total0;
    let k = select(i, i - rlx_p.total0, second);
    let heads = select(rlx_p.heads0, rlx_p.heads1, second);
    let q = k % rlx_p.per_head;
    let row = k / rlx_p.per_head;  // (b * seq + s) * heads + h
    let base = row * rlx_p.head_dim;
    if (q >= half_rot) {
      let e = base + rlx_p.n_rot + (q - half_rot);
      out_w(second, e, x_w(second, e));
      continue;
    }
    let bs = row / heads;
    let t = select(bs % rlx_p.seq, bs, rlx_p.per_batch != 0u) * half_rot + q;
    let i1 = select(2u * q, q, rlx_p.neox != 0u);
    let i2 = select(2u * q + 1u, q + half_rot, rlx_p.neox != 0u);
    let c = bitcast<f32>(cos_w(t));
    let s = bitcast<f32>(sin_w(t));
    let x1 = bitcast<f32>(x_w(second, base + i1));
    let x2 = bitcast<f32>(x_w(second, base + i2));
    out_w(second, base + i1, bitcast<u32>(rnd(x1 * c - x2 * s)));
    out_w(second, base + i2, bitcast<u32>(rnd(x2 * c + x1 * s)));
  }
}
)";

// What a rope step's dispatch needs, checked.
struct RopeArgs {
  DType t = DType::F32;
  int64_t half = 0, per_head = 0, total = 0;
  uint32_t heads = 0;
  Operand x, cs, sn, dst;
};

RopeArgs rope_args(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const auto& g = std::get<plan::RopeGeom>(st.geom);
  RopeArgs a;
  a.t = st.out.at(0).dtype;
  for (size_t i = 0; i < 3; ++i) {
    if (!wgsl_float(st.in.at(i).dtype))
      throw Error(what + ": WebGPU rope takes x, cos and sin in f32, f16 or bf16");
    u32(st.in.at(i).numel(), what);
  }
  if (g.n_rot <= 0 || g.n_rot % 2 != 0 || g.n_rot > g.head_dim)
    throw Error(what + ": rope n_rot " + std::to_string(g.n_rot) + " must be even and in (0, head_dim = " +
                std::to_string(g.head_dim) + "]");
  a.half = g.n_rot / 2, a.per_head = a.half + (g.head_dim - g.n_rot);
  const int64_t rows = g.batch * g.seq * g.heads;
  u32(rows * g.head_dim, what);
  a.total = rows * a.per_head;
  a.heads = u32(g.heads, what);
  a.x = cx.in(st.in[0]), a.cs = cx.in(st.in[1]), a.sn = cx.in(st.in[2]), a.dst = cx.out(st.out.at(0));
  return a;
}

bool overlap(const Operand& a, const Operand& b) {
  return a.buffer == b.buffer && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}
bool same(const Operand& a, const Operand& b) { return a.buffer == b.buffer && a.offset == b.offset && a.bytes == b.bytes; }

void dispatch_rope(LowerContext& cx, const plan::Step& st, const RopeArgs& a, const RopeArgs* b) {
  const auto& op = std::get<ops::Rope>(st.op);
  const auto& g = std::get<plan::RopeGeom>(st.geom);
  const std::string what = step_label(st);
  const RopeArgs& s1 = b ? *b : a;
  const std::vector<Operand> ops{a.dst, a.x, s1.dst, s1.x, a.cs, a.sn};
  const Binds bi = plan_binds(ops, false);
  const std::vector<std::string> names{"total0: u32", "total1: u32", "heads0: u32", "heads1: u32", "per_head: u32",
                                       "half_rot: u32", "n_rot: u32", "head_dim: u32", "seq: u32", "per_batch: u32",
                                       "neox: u32"};
  const codegen::Language& L = codegen::wgsl_language();
  codegen::Helpers h;
  L.dtype_helpers(a.t, h);
  std::string body = bi.decls(names) + h.source();
  body += "fn out_w(k: bool, e: u32, v: u32) { if (k) { " + bi.at(2, "e") + " = v; } else { " + bi.at(0, "e") +
          " = v; } }\n";
  body += "fn x_w(k: bool, e: u32) -> u32 { if (k) { return " + bi.at(3, "e") + "; } return " + bi.at(1, "e") + "; }\n";
  body += "fn cos_w(e: u32) -> u32 { return " + bi.at(4, "e") + "; }\n";
  body += "fn sin_w(e: u32) -> u32 { return " + bi.at(5, "e") + "; }\n";
  body += "fn rnd(v: f32) -> f32 { return " + L.round(a.t, "v") + "; }\n";
  body += kRopeBody;
  const int64_t total = a.total + (b ? b->total : 0);
  u32(total, what);
  cx.dispatch(Kernel{std::string("rope_") + dtype_name(a.t), body}, ops,
              {static_cast<uint32_t>(a.total), static_cast<uint32_t>(b ? b->total : 0), a.heads, s1.heads,
               static_cast<uint32_t>(a.per_head), static_cast<uint32_t>(a.half), static_cast<uint32_t>(g.n_rot),
               u32(g.head_dim, what), u32(g.seq, what), g.per_batch ? 1u : 0u, op.style == RopeStyle::NeoX ? 1u : 0u},
              false, cx.groups_1d(static_cast<uint64_t>(total), kWorkgroup));
}

}  // namespace

const FamilyClaims kRopeClaims{kind, node};

void lower_rope(LowerContext& cx, const plan::Step& st) {
  const RopeArgs a = rope_args(cx, st);
  if (a.total == 0) return;
  dispatch_rope(cx, st, a, nullptr);
}

bool lower_rope_pair(LowerContext& cx, const plan::Step& first, const plan::Step& second) {
  if (!std::holds_alternative<ops::Rope>(first.op) || !std::holds_alternative<ops::Rope>(second.op)) return false;
  const auto& o1 = std::get<ops::Rope>(first.op);
  const auto& o2 = std::get<ops::Rope>(second.op);
  const auto& g1 = std::get<plan::RopeGeom>(first.geom);
  const auto& g2 = std::get<plan::RopeGeom>(second.geom);
  if (o1.style != o2.style || g1.n_rot != g2.n_rot || g1.head_dim != g2.head_dim || g1.batch != g2.batch ||
      g1.seq != g2.seq || g1.per_batch != g2.per_batch || first.out.at(0).dtype != second.out.at(0).dtype)
    return false;
  const RopeArgs a = rope_args(cx, first), b = rope_args(cx, second);
  if (a.total == 0 || b.total == 0 || !same(a.cs, b.cs) || !same(a.sn, b.sn)) return false;
  // One dispatch runs both at once: neither may write what the other reads (the second's x being
  // the first's result, or an output placed over the other's dying input) or writes.
  for (const Operand* r : {&b.x, &b.cs, &b.sn, &b.dst})
    if (overlap(a.dst, *r)) return false;
  for (const Operand* r : {&a.x, &a.cs, &a.sn})
    if (overlap(b.dst, *r)) return false;
  dispatch_rope(cx, first, a, &b);
  return true;
}

}  // namespace rlx::webgpu
