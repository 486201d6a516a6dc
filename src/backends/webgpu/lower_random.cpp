// RngUniform on WebGPU: the CPU backend's Philox-4x32-10 stream (cpu/philox.h), bit for bit.
//
// The CPU computes low + (high - low) * (bits * 2^-32) in double and rounds it to the dtype; WGSL
// has no f64. For the ranges where that double computation is exact for every 32-bit `bits`
// (plan::rng_uniform_exact: the width's significand has at most 21 bits and low is close enough,
// e.g. [0, 1), [-1, 1), [-2.5, 7)), the value is (a + b * bits) * 2^e exactly: the kernel forms
// it in 64-bit integers (two words), rounds it once to f32 (round to nearest even, as the CPU's
// double -> float), then to f16 / bf16 as the CPU does, and clamps it into [lo, hi] (the plan's
// bounds). Other ranges, and RngNormal (double log / sin / cos), are not claimed.
// Element i uses block i / 4 of the stream (seed, offset); one invocation per block.
#include <cstring>
#include <string>
#include <vector>

#include "backends/webgpu/lower.h"
#include "codegen/language.h"
#include "plan/select_work.h"
#include "rlx/error.h"

namespace rlx::webgpu {
namespace {

constexpr std::string_view kBackend = "WebGPU";

const char* kUniform = R"(
// The 64-bit product a * b as (low, high).
fn mul_wide(a: u32, b: u32) -> vec2<u32> {
  let a0 = a & 0xffffu;
  let a1 = a >> 16u;
  let b0 = b & 0xffffu;
  let b1 = b >> 16u;
  let p00 = a0 * b0;
  let p01 = a0 * b1;
  let p10 = a1 * b0;
  let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
  return vec2<u32>((p00 & 0xffffu) | (mid << 16u), a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u));
}
fn philox(c_in: vec4<u32>, k0_in: u32, k1_in: u32) -> vec4<u32> {
  var c = c_in;
  var k0 = k0_in;
  var k1 = k1_in;
  for (var r = 0; r < 10; r++) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    let p0 = mul_wide(0xD2511F53u, c.x);
    let p1 = mul_wide(0xCD9E8D57u, c.z);
    c = vec4<u32>(p1.y ^ c.y ^ k0, p1.x, p0.y ^ c.w ^ k1, p0.x);
  }
  return c;
}
fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let lo = a.x + b.x;
  return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}
// (a + b * bits) * 2^e rounded to f32 (|a| + b * bits < 2^53; e keeps every nonzero value normal).
fn uniform_f32(bits: u32) -> f32 {
  let n = add64(vec2<u32>(rlx_p.a_lo, rlx_p.a_hi), mul_wide(rlx_p.b, bits));
  let neg = (n.y & 0x80000000u) != 0u;
  var m = n;
  if (neg) { m = add64(vec2<u32>(~n.x, ~n.y), vec2<u32>(1u, 0u)); }
  if (m.x == 0u && m.y == 0u) { return 0.0f; }
  var p: i32;
  if (m.y != 0u) { p = 63 - i32(countLeadingZeros(m.y)); } else { p = 31 - i32(countLeadingZeros(m.x)); }
  let sh = p - 23;  // at most 29: p < 53
  var mant: u32;
  if (sh <= 0) {
    mant = m.x << u32(-sh);
  } else {
    let s = u32(sh);
    mant = (m.x >> s) | select(0u, m.y << (32u - s), s < 32u);
    let rem = m.x & ((1u << s) - 1u);
    let half = 1u << (s - 1u);
    if (rem > half || (rem == half && (mant & 1u) == 1u)) {  // to nearest, ties to even
      mant += 1u;
    }
  }
  var ex = p + rlx_p.e;
  if (mant == 0x1000000u) {
    mant = mant >> 1u;
    ex += 1;
  }
  var u = select(0u, 0x80000000u, neg);
  if (ex > 127) {
    u |= 0x7f800000u;
  } else {
    u |= (u32(ex + 127) << 23u) | (mant & 0x7fffffu);
  }
  return bitcast<f32>(u);
}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let off = OFFSET;
  let offset = vec2<u32>(off, select(0u, 0xffffffffu, (off & 0x80000000u) != 0u));  // i64 held in an i32 word
  let blocks = rlx_p.n / 4u + select(0u, 1u, rlx_p.n % 4u != 0u);
  let lo = bitcast<f32>(rlx_p.lo);
  let hi = bitcast<f32>(rlx_p.hi);
  for (var blk = gid.x; blk < blocks; blk += nwg.x * 256u) {
    let r = philox(vec4<u32>(blk, 0u, offset.x, offset.y), rlx_p.seed_lo, rlx_p.seed_hi);
    for (var j = 0u; j < 4u; j++) {
      let i = blk * 4u + j;
      if (i >= rlx_p.n) { break; }
      var v = ROUND(uniform_f32(r[j]));
      if (v > hi) { v = hi; } else if (v < lo) { v = lo; }
      OUT = bitcast<u32>(v);
    }
  }
}
)";

uint32_t f32_bits(double v) {
  const auto f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

bool kind(std::string_view n) { return plan::random_claims_kind(n); }

bool node(const Graph& g, const Node& n, const DeviceInfo* info, std::string* why) {
  if (const auto* u = std::get_if<ops::RngUniform>(&n.op)) {
    const DType t = n.outputs.at(0).dtype;
    if (t == DType::F32 || t == DType::F16 || t == DType::BF16) {
      if (plan::rng_uniform_exact(u->low, u->high)) return true;
      return refuse(why, "WebGPU rng_uniform over [" + std::to_string(u->low) + ", " + std::to_string(u->high) +
                             "): the CPU's double-precision value rounds there, which WGSL cannot reproduce bit for bit "
                             "(ranges whose width has a short significand, like [0, 1) or [-1, 1), run)");
    }
  }
  plan::SelectDevice dev;
  dev.f64 = false;
  if (info) dev.name = info->name;
  return plan::select_family_claims_node(kBackend, dev, g, n, why);
}

}  // namespace

const FamilyClaims kRandomClaims{kind, node};

void lower_random(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const auto* u = std::get_if<ops::RngUniform>(&st.op);
  if (!u) throw Error(what + ": WebGPU runs rng_uniform only (rng_normal needs double log / sin / cos)");
  const plan::TensorRef& out = st.out.at(0);
  const DType t = out.dtype;
  if (t != DType::F32 && t != DType::F16 && t != DType::BF16)
    throw Error(what + ": WebGPU rng_uniform writes f32, f16 or bf16, not " + dtype_name(t));
  const auto x = plan::rng_uniform_exact(u->low, u->high);
  if (!x) throw Error(what + ": WebGPU rng_uniform: this range needs double rounding (see the claims)");
  const plan::UniformBounds bounds = plan::rng_uniform_bounds(t, u->low, u->high, what);
  const int64_t n = out.numel();
  if (n == 0) return;
  plan::select_require_32bit(what, kBackend, n + 3, "the output");
  const Operand y = cx.out(out);
  std::vector<Operand> ops{y};
  if (!st.in.empty()) {
    if (st.in[0].dtype != DType::I64 || st.in[0].numel() != 1) throw Error(what + ": the offset operand must be one i64 value");
    ops.push_back(cx.in(st.in[0]));
  }
  const Binds b = plan_binds(ops, false);
  codegen::Helpers h;
  codegen::wgsl_language().dtype_helpers(t, h);
  std::string src = b.decls({"n: u32", "seed_lo: u32", "seed_hi: u32", "a_lo: u32", "a_hi: u32", "b: u32", "e: i32",
                             "lo: u32", "hi: u32"}) +
                    h.source();
  src += "fn round_t(v: f32) -> f32 { return " + codegen::wgsl_language().round(t, "v") + "; }\n";
  std::string body = codegen::replace_all(kUniform, "OUT", b.at(0, "i"));
  body = codegen::replace_all(body, "OFFSET", ops.size() > 1 ? b.at(1, "0u") : std::string("0u"));
  body = codegen::replace_all(body, "ROUND(", "round_t(");
  src += body;
  const auto a = static_cast<uint64_t>(x->a);
  cx.dispatch(Kernel{std::string("rng_uniform_") + dtype_name(t) + (ops.size() > 1 ? "_offset" : ""), src}, ops,
              {static_cast<uint32_t>(n), static_cast<uint32_t>(u->seed), static_cast<uint32_t>(u->seed >> 32),
               static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32), x->b, static_cast<uint32_t>(x->e),
               f32_bits(bounds.lo), f32_bits(bounds.hi)},
              false, cx.groups_1d(static_cast<uint64_t>((n + 3) / 4), plan::kSelectWorkgroup));
}

}  // namespace rlx::webgpu
