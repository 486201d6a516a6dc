// The rows family on WebGPU: Reduce (every kind; float, integer and bool dtypes; any axes),
// Softmax / LogSoftmax (any axis), LayerNorm / RmsNorm (any trailing axes), FusedResidualLN /
// FusedResidualRmsNorm, GroupNorm and FusedSwiGLU, as generated WGSL kernels.
//
// Every kernel works on "lines" (a softmax row or column, a norm row, the elements of one Reduce
// output): a workgroup of WG invocations (256; 64 on a CPU adapter, which runs a workgroup's
// invocations in turn between barriers) takes TX = WG / TY lines at a time with TY invocations
// per line (about 4 elements each, a power of two), in one of two layouts: RF, the TY
// invocations of a line consecutive (contiguous lines), or lines fastest (TX consecutive lines
// whose elements lie next to each other, e.g. columns of [outer, axis, inner]). Line tiles are
// a grid-stride loop over at most 65535 workgroups; a line's partials are combined in workgroup
// memory in two levels (groups of up to 16, then the groups' results: 3 barriers). Floats accumulate in f32 (f16/bf16 rounded once at the store), softmax is
// max-subtracted, NaN wins Max / Min as on the CPU, and a norm or softmax line of at most
// TY * 16 elements is read once (held in registers).
// Integers: 8- to 32-bit sums and products wrap in 32 bits (the low bits of the CPU's 64-bit
// accumulation), means sum in 64 bits (two words) and divide truncating; i64 (held in 32-bit
// words) sums in 64 bits and products with an overflow bit, a result outside [-2^31, 2^31)
// being reported through the error flag, not wrapped.
#include <algorithm>
#include <bit>
#include <string>
#include <vector>

#include "backends/webgpu/lower.h"
#include "codegen/language.h"
#include "plan/rows_work.h"
#include "rlx/error.h"

namespace rlx::webgpu {
namespace {

constexpr uint32_t kCache = 16;  // line elements each invocation holds in registers (norms, softmax)

const codegen::Language& L() { return codegen::wgsl_language(); }

std::string u(uint64_t v) { return std::to_string(v) + "u"; }

uint32_t workgroup(const DeviceInfo& info) {
  uint32_t wg = info.adapter_type == "CPU" ? 64 : 256;
  while (wg > info.limits.max_compute_invocations_per_workgroup && wg > 1) wg >>= 1;
  return wg;
}

uint32_t pow2_ceil(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return static_cast<uint32_t>(std::min<uint64_t>(p, uint64_t{1} << 31));
}

uint32_t line_threads(uint64_t len, uint32_t wg) { return std::clamp<uint32_t>(pow2_ceil((len + 3) / 4), 1, wg); }

uint32_t u32(int64_t v, const std::string& what) { return plan::rows_u32(v, what, "WebGPU"); }

void check_sizes(const plan::Step& st) {
  for (const auto& r : st.in) u32(r.numel(), step_label(st));
  for (const auto& r : st.out) u32(r.numel(), step_label(st));
}

bool is_row_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// Helpers every rows kernel may use.
const char* kCommon = R"(fn rlx_bits(u: u32) -> f32 { return bitcast<f32>(u); }
fn rlx_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn max_nan(a: f32, b: f32) -> f32 { return select(a, b, b > a || rlx_isnan(b)); }
fn min_nan(a: f32, b: f32) -> f32 { return select(a, b, b < a || rlx_isnan(b)); }
// exp with NaN kept NaN (exp(NaN) is not NaN on every driver, e.g. SwiftShader).
fn rlx_exp(x: f32) -> f32 { return select(exp(x), x, rlx_isnan(x)); }
)";

// 64-bit integers as vec2<u32> (low, high), two's complement.
const char* kInt64 = R"(fn rlx_add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let lo = a.x + b.x;
  return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}
fn rlx_widen_s(v: i32) -> vec2<u32> { return vec2<u32>(bitcast<u32>(v), select(0u, 0xffffffffu, v < 0i)); }
// a / d for a quotient below 2^32 (a mean of 32-bit values).
fn rlx_divu64(a: vec2<u32>, d: u32) -> u32 {
  var r = a.y % d;
  var q = 0u;
  for (var i = 0u; i < 32u; i++) {
    let carry = r >> 31u;
    r = (r << 1u) | ((a.x >> (31u - i)) & 1u);
    q = q << 1u;
    if (carry != 0u || r >= d) {
      r = r - d;
      q = q | 1u;
    }
  }
  return q;
}
// a / d truncated toward zero.
fn rlx_divs64(a: vec2<u32>, d: u32) -> i32 {
  let neg = (a.y & 0x80000000u) != 0u;
  var m = a;
  if (neg) { m = rlx_add64(vec2<u32>(~a.x, ~a.y), vec2<u32>(1u, 0u)); }
  let q = bitcast<i32>(rlx_divu64(m, d));
  return select(q, 0i - q, neg);
}
fn rlx_mul_ovf(a: i32, b: i32) -> bool {
  let r = a * b;
  let lowest = -2147483647i - 1i;
  return (a == -1i && b == lowest) || (b == -1i && a == lowest) || (a != 0i && a != -1i && r / a != b);
}
)";

// `var<workgroup> rs_<name>` and `fn <name>(v, lid) -> T`: the combination (cb_<name>) of the
// values of the MC members of lid's line, MS invocations apart. Called in uniform control flow.
// Two levels instead of a tree of log2(MC) steps (each a barrier): members 0..NG-1 combine G
// consecutive members' values each (G = min(MC, 16), NG = MC / G), then every member combines
// the NG results itself: 3 barriers for any MC (a 256-wide line took 10), in a fixed order.
std::string group_reduce(const std::string& name, const std::string& type, const std::string& combine, uint32_t wg,
                         uint32_t ms, uint32_t mc) {
  const uint32_t gs = std::min<uint32_t>(mc, 16), ng = mc / gs;
  const std::string rs = "rs_" + name, r2 = "rs2_" + name;
  std::string s = "fn cb_" + name + "(a: " + type + ", b: " + type + ") -> " + type + " { return " + combine + "; }\n";
  s += "var<workgroup> " + rs + ": array<" + type + ", " + std::to_string(wg) + ">;\n";
  s += "var<workgroup> " + r2 + ": array<" + type + ", " + std::to_string(wg) + ">;\n";
  s += "fn " + name + "(v: " + type + ", lid: u32) -> " + type + " {\n";
  s += "  let m = (lid / " + u(ms) + ") % " + u(mc) + ";\n  let first = lid - m * " + u(ms) + ";\n";
  s += "  " + rs + "[lid] = v;\n  workgroupBarrier();\n";
  s += "  if (m < " + u(ng) + ") {\n    var a = " + rs + "[first + m * " + u(gs * ms) + "];\n";
  s += "    for (var j = 1u; j < " + u(gs) + "; j++) { a = cb_" + name + "(a, " + rs + "[first + (m * " + u(gs) +
       " + j) * " + u(ms) + "]); }\n    " + r2 + "[lid] = a;\n  }\n  workgroupBarrier();\n";
  s += "  var r = " + r2 + "[first];\n";
  s += "  for (var j = 1u; j < " + u(ng) + "; j++) { r = cb_" + name + "(r, " + r2 + "[first + j * " + u(ms) + "]); }\n";
  s += "  workgroupBarrier();\n  return r;\n}\n";
  return s;
}

const char* kMainSig =
    "fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,\n"
    "        @builtin(num_workgroups) nwg: vec3<u32>, @builtin(global_invocation_id) gid: vec3<u32>) {\n";

// `fn name(i: u32) -> f32`: word i (from the binding's start) of operand k as f32.
std::string loadf_fn(const std::string& name, const Binds& b, size_t k, DType t) {
  return "fn " + name + "(i: u32) -> f32 { return " + L().load(t, "rlx_b" + std::to_string(b.binding_of.at(k)) + "[i]") +
         "; }\n";
}

// The store of f32 value v as dtype t (rounded to its precision).
std::string storef(DType t, const std::string& v) { return L().store(t, L().round(t, v)); }

std::string helpers_for(DType t) {
  codegen::Helpers h;
  L().dtype_helpers(t, h);
  return h.source();
}

// ---- Reduce ----

struct ReduceCode {
  std::string type, load, ident, combine, finish;  // load of `w` (the raw word), finish of `a` -> stored word
  bool flag = false;
};

ReduceCode reduce_code(ReduceKind k, DType t) {
  ReduceCode c;
  const bool sum = k == ReduceKind::Sum, mean = k == ReduceKind::Mean, prod = k == ReduceKind::Prod;
  const bool max = k == ReduceKind::Max;
  if (is_float(t)) {
    c.type = "f32";
    c.load = L().load(t, "w");
    if (sum || mean || prod) {
      c.ident = prod ? "1.0f" : "0.0f";
      c.combine = prod ? "a * b" : "a + b";
    } else {
      c.ident = max ? "rlx_bits(0xff800000u)" : "rlx_bits(0x7f800000u)";
      c.combine = max ? "max_nan(a, b)" : "min_nan(a, b)";
    }
    c.finish = storef(t, mean ? "select(a / f32(rlx_p.count), rlx_bits(0x7fc00000u), rlx_p.count == 0u)" : "a");
    return c;
  }
  if (t == DType::Bool) {  // Max = any, Min = all
    c.type = "u32";
    c.load = "w";
    c.ident = max ? "0u" : "1u";
    c.combine = max ? "max(a, b)" : "min(a, b)";
    c.finish = "select(0u, 1u, a != 0u)";
    return c;
  }
  const bool sgn = is_signed_int(t);
  if (mean) {
    c.type = "vec2<u32>";
    c.load = sgn ? "rlx_widen_s(bitcast<i32>(w))" : "vec2<u32>(w, 0u)";
    c.ident = "vec2<u32>(0u, 0u)";
    c.combine = "rlx_add64(a, b)";
    c.finish = sgn ? L().store(t, "rlx_divs64(a, rlx_p.count)") : "rlx_divu64(a, rlx_p.count)";
    return c;
  }
  if (t == DType::I64 && sum) {
    c.type = "vec2<u32>";
    c.load = "rlx_widen_s(bitcast<i32>(w))";
    c.ident = "vec2<u32>(0u, 0u)";
    c.combine = "rlx_add64(a, b)";
    c.finish = "fin_i64_sum(a)";
    c.flag = true;
    return c;
  }
  if (t == DType::I64 && prod) {  // (value, flags: 1 = overflowed, 2 = a factor is 0)
    c.type = "vec2<u32>";
    c.load = "vec2<u32>(w, select(0u, 2u, w == 0u))";
    c.ident = "vec2<u32>(1u, 0u)";
    c.combine = "prod_i64(a, b)";
    c.finish = "fin_i64_prod(a)";
    c.flag = true;
    return c;
  }
  if (sum || prod) {  // 32-bit wrapping, then the dtype's wrap
    c.type = "u32";
    c.load = "w";
    c.ident = prod ? "1u" : "0u";
    c.combine = prod ? "a * b" : "a + b";
    c.finish = sgn ? L().store(t, L().round(t, "bitcast<i32>(a)")) : L().round(t, "a");
    return c;
  }
  c.type = sgn ? "i32" : "u32";
  c.load = L().load(t, "w");
  c.ident = sgn ? (max ? "bitcast<i32>(0x80000000u)" : "0x7fffffffi") : (max ? "0u" : "0xffffffffu");
  c.combine = max ? "max(a, b)" : "min(a, b)";
  c.finish = L().store(t, "a");
  return c;
}

const char* kI64Finish = R"(fn fin_i64_sum(a: vec2<u32>) -> u32 {
  if (a.y != select(0u, 0xffffffffu, (a.x & 0x80000000u) != 0u)) { atomicMax(&rlx_err, 8); }
  return a.x;
}
fn prod_i64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let x = bitcast<i32>(a.x);
  let y = bitcast<i32>(b.x);
  let ovf = select(0u, 1u, rlx_mul_ovf(x, y));
  return vec2<u32>(bitcast<u32>(x * y), a.y | b.y | ovf);
}
fn fin_i64_prod(a: vec2<u32>) -> u32 {
  if ((a.y & 2u) != 0u) { return 0u; }
  if ((a.y & 1u) != 0u) { atomicMax(&rlx_err, 8); }
  return a.x;
}
)";

void lower_reduce(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const auto& g = std::get<plan::ReduceGeom>(st.geom);
  const DType t = st.in.at(0).dtype;
  const plan::TensorRef& out = st.out.at(0);
  // Kept and reduced groups with their strides in the (row-major) input.
  plan::ReduceWalk walk = plan::reduce_walk(st, "WebGPU");
  std::vector<uint32_t>&kd = walk.kept_dims, &ks = walk.kept_strides, &rd = walk.reduced_dims, &rs = walk.reduced_strides;
  const bool rf = walk.row_first;
  const uint32_t wg = workgroup(cx.info());
  const uint32_t outputs = walk.outputs, count = walk.count;
  const uint32_t ty = rf ? line_threads(count, wg)
                         : wg / std::clamp<uint32_t>(pow2_ceil(kd.back()), 1, std::min<uint32_t>(32, wg));
  const uint32_t tx = wg / ty;
  const ReduceCode c = reduce_code(g.kind, t);
  const std::vector<Operand> ops{cx.in(st.in.at(0)), cx.out(out)};
  std::vector<std::string> names{"outputs: u32", "count: u32"};
  std::vector<uint32_t> values{outputs, count};
  auto offset_fn = [&](const std::string& fn, const std::string& p, const std::vector<uint32_t>& dims,
                       const std::vector<uint32_t>& strides) {
    for (size_t d = 0; d < dims.size(); ++d) {
      names.push_back(p + "d" + std::to_string(d) + ": u32");
      values.push_back(dims[d]);
      names.push_back(p + "s" + std::to_string(d) + ": u32");
      values.push_back(strides[d]);
    }
    std::string s = "fn " + fn + "(x: u32) -> u32 {\n  var o = x;\n  var off = 0u;\n";
    for (size_t d = dims.size(); d-- > 1;) {
      const std::string D = "rlx_p." + p + "d" + std::to_string(d), S = "rlx_p." + p + "s" + std::to_string(d);
      s += "  off += (o % " + D + ") * " + S + ";\n  o = o / " + D + ";\n";
    }
    if (!dims.empty()) s += "  off += o * rlx_p." + p + "s0;\n";
    return s + "  return off;\n}\n";
  };
  const std::string koff = offset_fn("koff", "k", kd, ks), roff = offset_fn("roff", "r", rd, rs);
  const Binds b = plan_binds(ops, c.flag);
  std::string src = b.decls(names) + kCommon + kInt64 + (c.flag ? kI64Finish : "") + helpers_for(t) + koff + roff;
  src += "fn loada(i: u32) -> " + c.type + " { let w = rlx_b" + std::to_string(b.binding_of[0]) + "[i]; return " + c.load +
         "; }\n";
  src += group_reduce("red", c.type, c.combine, wg, rf ? 1 : tx, ty);
  src += "@compute @workgroup_size(" + std::to_string(wg) + ")\n" + kMainSig;
  src += rf ? "  let c = lid / " + u(ty) + ";\n  let k = lid % " + u(ty) + ";\n"
            : "  let c = lid % " + u(tx) + ";\n  let k = lid / " + u(tx) + ";\n";
  src += "  let tiles = (rlx_p.outputs + " + u(tx - 1) + ") / " + u(tx) + ";\n";
  src += "  for (var t = wid.x; t < tiles; t += nwg.x) {\n";
  src += "    let o = t * " + u(tx) + " + c;\n";
  src += "    var a: " + c.type + " = " + c.ident + ";\n";
  src += "    if (o < rlx_p.outputs) {\n      let base = rlx_p.o0 + koff(o);\n";
  src += "      for (var r = k; r < rlx_p.count; r += " + u(ty) + ") { a = cb_red(a, loada(base + roff(r))); }\n    }\n";
  src += "    a = red(a, lid);\n";
  src += "    if (k == 0u && o < rlx_p.outputs) { " + b.at(1, "o") + " = " + c.finish + "; }\n  }\n}\n";
  cx.dispatch(Kernel{"reduce", src}, ops, values, c.flag, cx.groups_1d(outputs, tx));
}

// ---- Softmax / LogSoftmax ----

void lower_softmax(LowerContext& cx, const plan::Step& st, bool log) {
  const std::string what = step_label(st);
  const auto& g = std::get<plan::AxisGeom>(st.geom);
  const DType t = st.in.at(0).dtype;
  const uint32_t wg = workgroup(cx.info());
  const bool rf = g.inner == 1;
  const uint32_t axis = u32(g.axis, what), inner = u32(g.inner, what), cols = u32(g.outer * g.inner, what);
  const uint32_t ty = rf ? line_threads(axis, wg)
                         : wg / std::clamp<uint32_t>(pow2_ceil(inner), 1, std::min<uint32_t>(32, wg));
  const uint32_t tx = wg / ty;
  const bool cached = axis <= ty * kCache;
  const std::vector<Operand> ops{cx.in(st.in.at(0)), cx.out(st.out.at(0))};
  const Binds b = plan_binds(ops, false);
  std::string src = b.decls({"cols: u32", "axis: u32", "inner: u32"}) + kCommon + helpers_for(t);
  src += loadf_fn("loadx", b, 0, t);
  src += "fn storey(i: u32, v: f32) { rlx_b" + std::to_string(b.binding_of[1]) + "[i] = " + storef(t, "v") + "; }\n";
  const uint32_t ms = rf ? 1 : tx;
  src += group_reduce("red_max", "f32", "max_nan(a, b)", wg, ms, ty);
  src += group_reduce("red_sum", "f32", "a + b", wg, ms, ty);
  const std::string out_expr = log ? "(x - M) - ls" : "rlx_exp(x - M) * inv";
  const std::string fin = log ? "    let ls = log(S);\n" : "    let inv = 1.0f / S;\n";
  src += "@compute @workgroup_size(" + std::to_string(wg) + ")\n" + kMainSig;
  src += rf ? "  let c = lid / " + u(ty) + ";\n  let kk = lid % " + u(ty) + ";\n"
            : "  let c = lid % " + u(tx) + ";\n  let kk = lid / " + u(tx) + ";\n";
  src += "  let NEG_INF = rlx_bits(0xff800000u);\n";
  src += "  let tiles = (rlx_p.cols + " + u(tx - 1) + ") / " + u(tx) + ";\n";
  src += "  for (var t = wid.x; t < tiles; t += nwg.x) {\n";
  src += "    let col = t * " + u(tx) + " + c;\n    let ok = col < rlx_p.cols;\n";
  src += "    let at = select(0u, (col / rlx_p.inner) * rlx_p.axis * rlx_p.inner + col % rlx_p.inner, ok);\n";
  src += "    let xo = rlx_p.o0 + at;\n    let yo = rlx_p.o1 + at;\n";
  if (cached) {
    src += "    var xv = array<f32, " + std::to_string(kCache) + ">();\n    var m = NEG_INF;\n";
    src += "    for (var i = 0u; i < " + u(kCache) + "; i++) {\n      let k = kk + i * " + u(ty) + ";\n";
    src += "      if (ok && k < rlx_p.axis) {\n        xv[i] = loadx(xo + k * rlx_p.inner);\n        m = max_nan(m, xv[i]);\n      }\n    }\n";
    src += "    let M = red_max(m, lid);\n    var s = 0.0f;\n";
    src += "    for (var i = 0u; i < " + u(kCache) + "; i++) {\n";
    src += "      if (ok && kk + i * " + u(ty) + " < rlx_p.axis) { s += rlx_exp(xv[i] - M); }\n    }\n";
    src += "    let S = red_sum(s, lid);\n" + fin;
    src += "    for (var i = 0u; i < " + u(kCache) + "; i++) {\n      let k = kk + i * " + u(ty) + ";\n";
    src += "      if (ok && k < rlx_p.axis) {\n        let x = xv[i];\n        storey(yo + k * rlx_p.inner, " + out_expr +
           ");\n      }\n    }\n";
  } else {
    src += "    var m = NEG_INF;\n    var s = 0.0f;\n";
    src += "    if (ok) {\n      for (var k = kk; k < rlx_p.axis; k += " + u(ty) + ") {\n";
    src += "        let x = loadx(xo + k * rlx_p.inner);\n        let mn = max_nan(m, x);\n";
    src += "        if (mn != NEG_INF) { s = s * rlx_exp(m - mn) + rlx_exp(x - mn); }\n        m = mn;\n      }\n    }\n";
    src += "    let M = red_max(m, lid);\n";
    src += "    let S = red_sum(select(s * rlx_exp(m - M), 0.0f, s == 0.0f), lid);\n" + fin;
    src += "    if (ok) {\n      for (var k = kk; k < rlx_p.axis; k += " + u(ty) + ") {\n";
    src += "        let x = loadx(xo + k * rlx_p.inner);\n        storey(yo + k * rlx_p.inner, " + out_expr +
           ");\n      }\n    }\n";
  }
  src += "  }\n}\n";
  cx.dispatch(Kernel{log ? "log_softmax" : "softmax", src}, ops, {cols, axis, inner}, false,
              cx.groups_1d(cols, tx));
}

// ---- norms ----

void lower_norm(LowerContext& cx, const plan::Step& st, const plan::NormWork& n) {
  const std::string what = step_label(st);
  const DType t = st.in.at(0).dtype;
  const uint32_t wg = workgroup(cx.info());
  const uint32_t rows = u32(n.rows, what), len = u32(n.len, what);
  const uint32_t ty = line_threads(len, wg), rpw = wg / ty;
  const bool cached = len <= ty * kCache;
  // Operands: x, [residual], gamma, [beta], y.
  std::vector<Operand> ops{cx.in(st.in.at(0))};
  size_t kr = 0, kb = 0;
  if (n.res) kr = ops.size(), ops.push_back(cx.in(st.in.at(1)));
  const size_t gi = n.res ? 2 : 1;
  const size_t kg = ops.size();
  ops.push_back(cx.in(st.in.at(gi)));
  if (n.beta) kb = ops.size(), ops.push_back(cx.in(st.in.at(gi + 1)));
  const size_t ky = ops.size();
  ops.push_back(cx.out(st.out.at(0)));
  const Binds b = plan_binds(ops, false);
  std::string src = b.decls({"rows: u32", "len: u32", "gmod: u32", "gmul: u32", "gdiv: u32", "eps: f32"}) + kCommon +
                    helpers_for(t);
  const std::string lx = L().load(t, b.at(0, "i"));
  src += "fn loadv(i: u32) -> f32 { return " +
         (n.res ? L().round(t, lx + " + " + L().load(t, b.at(kr, "i"))) : lx) + "; }\n";
  src += "fn loadg(i: u32) -> f32 { return " + L().load(t, b.at(kg, "i")) + "; }\n";
  if (n.beta) src += "fn loadb(i: u32) -> f32 { return " + L().load(t, b.at(kb, "i")) + "; }\n";
  src += "fn storey(i: u32, v: f32) { " + b.at(ky, "i") + " = " + storef(t, "v") + "; }\n";
  src += "fn gidx(row: u32, j: u32) -> u32 { return (row % rlx_p.gmod) * rlx_p.gmul + j / rlx_p.gdiv; }\n";
  src += group_reduce("red_sum", "f32", "a + b", wg, 1, ty);
  const std::string out = std::string("(v - mean) * inv * loadg(gidx(row, k))") + (n.beta ? " + loadb(gidx(row, k))" : "");
  src += "@compute @workgroup_size(" + std::to_string(wg) + ")\n" + kMainSig;
  src += "  let rl = lid / " + u(ty) + ";\n  let kk = lid % " + u(ty) + ";\n";
  src += "  let tiles = (rlx_p.rows + " + u(rpw - 1) + ") / " + u(rpw) + ";\n";
  src += "  let n = f32(rlx_p.len);\n";
  src += "  for (var t = wid.x; t < tiles; t += nwg.x) {\n";
  src += "    let row = t * " + u(rpw) + " + rl;\n    let ok = row < rlx_p.rows;\n";
  src += "    let base = select(0u, row * rlx_p.len, ok);\n    var mean = 0.0f;\n";
  if (cached) {
    src += "    var xv = array<f32, " + std::to_string(kCache) + ">();\n    var s = 0.0f;\n";
    src += "    for (var i = 0u; i < " + u(kCache) + "; i++) {\n      let k = kk + i * " + u(ty) + ";\n";
    src += "      if (ok && k < rlx_p.len) {\n        xv[i] = loadv(base + k);\n        s += xv[i];\n      }\n    }\n";
    if (!n.rms) src += "    mean = red_sum(s, lid) / n;\n";
    src += "    var q = 0.0f;\n";
    src += "    for (var i = 0u; i < " + u(kCache) + "; i++) {\n";
    src += "      if (ok && kk + i * " + u(ty) + " < rlx_p.len) {\n        let d = xv[i] - mean;\n        q += d * d;\n      }\n    }\n";
    src += "    let inv = 1.0f / sqrt(red_sum(q, lid) / n + rlx_p.eps);\n";
    src += "    for (var i = 0u; i < " + u(kCache) + "; i++) {\n      let k = kk + i * " + u(ty) + ";\n";
    src += "      if (ok && k < rlx_p.len) {\n        let v = xv[i];\n        storey(base + k, " + out + ");\n      }\n    }\n";
  } else {
    if (!n.rms) {
      src += "    var s = 0.0f;\n";
      src += "    if (ok) { for (var k = kk; k < rlx_p.len; k += " + u(ty) + ") { s += loadv(base + k); } }\n";
      src += "    mean = red_sum(s, lid) / n;\n";
    }
    src += "    var q = 0.0f;\n";
    src += "    if (ok) {\n      for (var k = kk; k < rlx_p.len; k += " + u(ty) + ") {\n";
    src += "        let d = loadv(base + k) - mean;\n        q += d * d;\n      }\n    }\n";
    src += "    let inv = 1.0f / sqrt(red_sum(q, lid) / n + rlx_p.eps);\n";
    src += "    if (ok) {\n      for (var k = kk; k < rlx_p.len; k += " + u(ty) + ") {\n";
    src += "        let v = loadv(base + k);\n        storey(base + k, " + out + ");\n      }\n    }\n";
  }
  src += "  }\n}\n";
  const std::string name = std::string(n.rms ? "rms_norm" : "layer_norm") + (n.res ? "_residual" : "");
  cx.dispatch(Kernel{name, src}, ops,
              {rows, len, u32(n.gmod, what), u32(n.gmul, what), u32(n.gdiv, what),
               std::bit_cast<uint32_t>(static_cast<float>(n.eps))},
              false, cx.groups_1d(rows, rpw));
}

// ---- FusedSwiGLU ----

void lower_swiglu(LowerContext& cx, const plan::Step& st, bool gate_first) {
  const std::string what = step_label(st);
  const auto& g = std::get<plan::AxisGeom>(st.geom);
  const DType t = st.in.at(0).dtype;
  const uint32_t wg = 256;
  const uint32_t n = u32(g.out_axis, what), total = u32(g.outer * g.out_axis, what);
  u32(g.outer * 2 * g.out_axis, what);
  const std::vector<Operand> ops{cx.in(st.in.at(0)), cx.out(st.out.at(0))};
  const Binds b = plan_binds(ops, false);
  std::string src = b.decls({"total: u32", "n: u32", "goff: u32", "uoff: u32"}) + helpers_for(t);
  src += loadf_fn("loadx", b, 0, t);
  src += "@compute @workgroup_size(" + std::to_string(wg) + ")\n" + kMainSig;
  src += "  for (var i = gid.x; i < rlx_p.total; i += nwg.x * " + u(wg) + ") {\n";
  src += "    let row = i / rlx_p.n;\n    let col = i - row * rlx_p.n;\n";
  src += "    let bx = rlx_p.o0 + row * 2u * rlx_p.n + col;\n";
  src += "    let gv = loadx(bx + rlx_p.goff);\n    let uv = loadx(bx + rlx_p.uoff);\n";
  src += "    let sv = " + L().round(t, "gv / (1.0f + exp(-gv))") + ";\n";
  src += "    " + b.at(1, "i") + " = " + storef(t, "sv * uv") + ";\n  }\n}\n";
  cx.dispatch(Kernel{"swiglu", src}, ops, {total, n, gate_first ? 0u : n, gate_first ? n : 0u}, false,
              cx.groups_1d(total, wg));
}

// ---- claims ----

bool kind(std::string_view name) { return plan::rows_claims_kind(name); }

bool node(const Graph& g, const Node& n, const DeviceInfo* info, std::string* why) {
  (void)info;
  if (!plan::rows_claims_dtypes_agree(g, n, "WebGPU", why)) return false;
  const std::string name = op_name(n.op);
  const DType t = g.shape(n.inputs.at(0)).dtype;
  if (const auto* r = std::get_if<ops::Reduce>(&n.op)) {
    const bool minmax = r->kind == ReduceKind::Max || r->kind == ReduceKind::Min;
    if (t == DType::Bool) return minmax ? true : refuse(why, "WebGPU reduce of bool is Max (any) or Min (all) only");
    if (is_float(t) || is_int(t)) return true;
    return refuse(why, std::string("the WebGPU reduce has no kernel for ") + dtype_name(t));
  }
  if (!is_row_float(t)) return refuse(why, "WebGPU " + name + " needs f32, f16 or bf16");
  return plan::rows_claims_attributes(g, n, why);
}

}  // namespace

const FamilyClaims kRowsClaims{kind, node};

void lower_rows(LowerContext& cx, const plan::Step& st) {
  check_sizes(st);
  const plan::RowsWork w = plan::rows_work(st, "WebGPU");
  if (std::holds_alternative<plan::ReduceWork>(w)) return lower_reduce(cx, st);
  if (const auto* s = std::get_if<plan::SoftmaxWork>(&w)) return lower_softmax(cx, st, s->log);
  if (const auto* n = std::get_if<plan::NormWork>(&w)) return lower_norm(cx, st, *n);
  lower_swiglu(cx, st, std::get<plan::SwiGLUWork>(w).gate_first);
}

}  // namespace rlx::webgpu
