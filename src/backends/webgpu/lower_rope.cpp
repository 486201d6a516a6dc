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
const char* kRopeBody = R"(
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let half_rot = rlx_p.half_rot;
  for (var i = gid.x; i < rlx_p.total; i += nwg.x * 256u) {
    let q = i % rlx_p.per_head;
    let row = i / rlx_p.per_head;  // (b * seq + s) * heads + h
    let base = row * rlx_p.head_dim;
    if (q >= half_rot) {
      let e = base + rlx_p.n_rot + (q - half_rot);
      out_w(e, x_w(e));
      continue;
    }
    let bs = row / rlx_p.heads;
    let t = select(bs % rlx_p.seq, bs, rlx_p.per_batch != 0u) * half_rot + q;
    let i1 = select(2u * q, q, rlx_p.neox != 0u);
    let i2 = select(2u * q + 1u, q + half_rot, rlx_p.neox != 0u);
    let c = bitcast<f32>(cos_w(t));
    let s = bitcast<f32>(sin_w(t));
    let x1 = bitcast<f32>(x_w(base + i1));
    let x2 = bitcast<f32>(x_w(base + i2));
    out_w(base + i1, bitcast<u32>(rnd(x1 * c - x2 * s)));
    out_w(base + i2, bitcast<u32>(rnd(x2 * c + x1 * s)));
  }
}
)";

}  // namespace

const FamilyClaims kRopeClaims{kind, node};

void lower_rope(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const auto& op = std::get<ops::Rope>(st.op);
  const auto& g = std::get<plan::RopeGeom>(st.geom);
  const DType t = st.out.at(0).dtype;
  for (size_t i = 0; i < 3; ++i) {
    if (!wgsl_float(st.in.at(i).dtype))
      throw Error(what + ": WebGPU rope takes x, cos and sin in f32, f16 or bf16");
    u32(st.in.at(i).numel(), what);
  }
  if (g.n_rot <= 0 || g.n_rot % 2 != 0 || g.n_rot > g.head_dim)
    throw Error(what + ": rope n_rot " + std::to_string(g.n_rot) + " must be even and in (0, head_dim = " +
                std::to_string(g.head_dim) + "]");
  const int64_t half = g.n_rot / 2, per_head = half + (g.head_dim - g.n_rot);
  const int64_t rows = g.batch * g.seq * g.heads;
  u32(rows * g.head_dim, what);
  const int64_t total = rows * per_head;
  if (total == 0) return;

  const Operand x = cx.in(st.in[0]), cs = cx.in(st.in[1]), sn = cx.in(st.in[2]), dst = cx.out(st.out.at(0));
  const std::vector<Operand> ops{dst, x, cs, sn};
  const Binds b = plan_binds(ops, false);
  const std::vector<std::string> names{"total: u32", "per_head: u32", "half_rot: u32", "n_rot: u32", "head_dim: u32",
                                       "heads: u32", "seq: u32",      "per_batch: u32", "neox: u32"};
  const codegen::Language& L = codegen::wgsl_language();
  codegen::Helpers h;
  L.dtype_helpers(t, h);
  std::string body = b.decls(names) + h.source();
  body += "fn out_w(e: u32, v: u32) { " + b.at(0, "e") + " = v; }\n";
  body += "fn x_w(e: u32) -> u32 { return " + b.at(1, "e") + "; }\n";
  body += "fn cos_w(e: u32) -> u32 { return " + b.at(2, "e") + "; }\n";
  body += "fn sin_w(e: u32) -> u32 { return " + b.at(3, "e") + "; }\n";
  body += "fn rnd(v: f32) -> f32 { return " + L.round(t, "v") + "; }\n";
  body += kRopeBody;
  cx.dispatch(Kernel{std::string("rope_") + dtype_name(t), body}, ops,
              {static_cast<uint32_t>(total), static_cast<uint32_t>(per_head), static_cast<uint32_t>(half),
               static_cast<uint32_t>(g.n_rot), u32(g.head_dim, what), u32(g.heads, what), u32(g.seq, what),
               g.per_batch ? 1u : 0u, op.style == RopeStyle::NeoX ? 1u : 0u},
              false, cx.groups_1d(static_cast<uint64_t>(total), kWorkgroup));
}

}  // namespace rlx::webgpu
