// The rows family on Vulkan: Reduce (every kind, float / integer / bool dtypes, any axes),
// Softmax / LogSoftmax (any axis), LayerNorm / RmsNorm (any trailing axis), FusedResidualLN /
// FusedResidualRmsNorm, GroupNorm and FusedSwiGLU. One pipeline per kernel variant (op kind x
// dtype x layout); every size and stride is a push constant, so one pipeline serves all shapes.
// The kernels (kernels/rows.h) give each line (row, column or output) TY threads of a 256-wide
// workgroup and combine their partials with subgroup operations or a shared-memory tree.
//
// Refused (the shared legalize decomposes them): LayerNorm2d and BatchNormInference; Softmax,
// LogSoftmax and FusedSwiGLU in f64 (GLSL has no double exp/log).
#include <algorithm>
#include <bit>
#include <cstring>

#include "backends/vulkan/kernels/rows.h"
#include "backends/vulkan/lower.h"
#include "codegen/elementwise.h"
#include "codegen/language.h"
#include "plan/rows_work.h"
#include "rlx/error.h"

namespace rlx::vulkan {
namespace {

constexpr uint32_t kCache = 16;  // line elements each thread holds in registers (norms, softmax)

// Workgroup size: 256 on a GPU (latency hiding), 64 on a CPU device (lavapipe runs a workgroup's
// invocations in turn, switching at every barrier); at most what the device allows.
uint32_t workgroup(const DeviceInfo& info) {
  uint32_t wg = info.type == VK_PHYSICAL_DEVICE_TYPE_CPU ? 64 : 256;
  while (wg > info.max_invocations && wg > 1) wg >>= 1;
  return wg;
}

uint32_t pow2_ceil(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return static_cast<uint32_t>(std::min<uint64_t>(p, uint64_t{1} << 31));
}

// Threads per contiguous line of `len` elements: about 4 elements each, at most a workgroup.
uint32_t line_threads(uint64_t len, uint32_t wg) { return std::clamp<uint32_t>(pow2_ceil((len + 3) / 4), 1, wg); }

uint32_t u32(int64_t v, const std::string& what) { return plan::rows_u32(v, what, "Vulkan"); }

void check_sizes(const plan::Step& st) {
  for (const auto& r : st.in) u32(r.numel(), step_label(st));
  for (const auto& r : st.out) u32(r.numel(), step_label(st));
}

bool is_int_dtype(DType t) {
  return t == DType::I8 || t == DType::I16 || t == DType::I32 || t == DType::I64 || t == DType::U8 || t == DType::U32;
}
bool is_row_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// One group-reduction function `name` over type `type`: `combine` spells CB(a, b), `sg` the
// subgroup reduction of v ("" for none).
std::string group_reduce(const std::string& name, const std::string& type, const std::string& combine,
                         const std::string& sg) {
  std::string s = "#define RT_" + name + " " + type + "\n#define CB_" + name + "(a, b) " + combine + "\n";
  if (!sg.empty()) s += "#define SG_" + name + "(v) " + sg + "\n";
  return s + codegen::replace_all(ksrc::kGroupReduce, "NAME", name);
}

// "#version 450", extensions, local size and the dtype helpers.
std::string prelude(const LowerContext& cx, std::vector<DType> dtypes, bool subgroups) {
  const uint32_t wg = workgroup(cx.info());
  std::string s = glsl_header(dtypes, subgroups);
  s += "layout(local_size_x = " + std::to_string(wg) + ") in;\n#define WG " + std::to_string(wg) + "u\n";
  s += glsl_dtype_helpers(dtypes);
  s += subgroups ? ksrc::kSubgroupInit : ksrc::kNoSubgroupInit;
  return s;
}

std::string define(const std::string& name, const std::string& value) { return "#define " + name + " " + value + "\n"; }

uint32_t float_bits(float f) { return std::bit_cast<uint32_t>(f); }

// ---- Reduce ----

struct ReduceCode {
  std::string type, load, ident, combine, sg, finish;
  bool wide = false;  // needs 64-bit integers
};

// How kind k of dtype t accumulates: floats in f32 (f64 in double), 8-32-bit integer sums and
// products in 32-bit uint (the result wraps to the type as the CPU's 64-bit accumulation does),
// integer means in 64 bits, Max / Min in the value's own type (bool as 0 / 1).
ReduceCode reduce_code(ReduceKind k, DType t, bool subgroups) {
  ReduceCode c;
  const std::string raw = "X.data[i]";
  const bool sum = k == ReduceKind::Sum || k == ReduceKind::Mean, prod = k == ReduceKind::Prod;
  const bool max = k == ReduceKind::Max;
  if (is_float(t)) {
    const std::string F = t == DType::F64 ? "double" : "float";
    c.type = F;
    c.load = F + "(" + glsl_load(t, raw) + ")";
    const std::string inf = F + "(uintBitsToFloat(0x7f800000u))";
    const std::string nan = F + "(uintBitsToFloat(0x7fc00000u))";
    if (sum || prod) {
      c.ident = F + (prod ? "(1.0)" : "(0.0)");
      c.combine = prod ? "((a) * (b))" : "((a) + (b))";
      if (t != DType::F64 && subgroups) c.sg = prod ? "subgroupMul(v)" : "subgroupAdd(v)";
    } else {
      c.ident = max ? "(-" + inf + ")" : inf;
      // NaN wins, as the CPU's (v > a || isnan(v)).
      c.combine = std::string("(((b) ") + (max ? ">" : "<") + " (a) || isnan(b)) ? (b) : (a))";
      if (t != DType::F64 && subgroups)
        c.sg = "(subgroupMax(isnan(v) ? 1u : 0u) != 0u ? " + nan + " : " + (max ? "subgroupMax(v)" : "subgroupMin(v)") + ")";
    }
    if (k == ReduceKind::Mean) c.finish = "(p.count == 0u ? " + nan + " : (a) / " + F + "(p.count))";
    else c.finish = "(a)";
    c.finish = glsl_store(t, t == DType::F64 ? c.finish : "float(" + c.finish + ")");
    return c;
  }
  const std::string S = codegen::glsl_language().storage_type(t);
  if (t == DType::Bool) {  // Max = any, Min = all
    c.type = "uint";
    c.load = "uint(" + raw + ")";
    c.ident = max ? "0u" : "1u";
    c.combine = max ? "max((a), (b))" : "min((a), (b))";
    if (subgroups) c.sg = max ? "subgroupMax(v)" : "subgroupMin(v)";
    c.finish = "uint8_t((a) != 0u ? 1u : 0u)";
    return c;
  }
  const bool sgn = is_signed_int(t);
  if (t == DType::I64) {
    c.wide = true;
    if (sum && k != ReduceKind::Mean) c.type = "uint64_t";
    else c.type = "int64_t";
    c.load = c.type + "(" + raw + ")";
    if (sum || prod) {
      c.ident = c.type + (prod ? "(1)" : "(0)");
      c.combine = prod ? "((a) * (b))" : "((a) + (b))";
      c.finish = k == ReduceKind::Mean ? "((a) / int64_t(p.count))" : "int64_t(a)";
    } else {
      c.ident = max ? "(int64_t(1) << 63)" : "(~(int64_t(1) << 63))";
      c.combine = std::string("(((b) ") + (max ? ">" : "<") + " (a)) ? (b) : (a))";
      c.finish = "(a)";
    }
    return c;
  }
  // 8- to 32-bit integers.
  const std::string widen = sgn ? "int(" + raw + ")" : "uint(" + raw + ")";
  if (k == ReduceKind::Mean) {
    c.wide = true;
    c.type = sgn ? "int64_t" : "uint64_t";
    c.load = c.type + "(" + widen + ")";
    c.ident = c.type + "(0)";
    c.combine = "((a) + (b))";
    c.finish = S + "(" + (sgn ? "int" : "uint") + "((a) / " + c.type + "(p.count)))";
  } else if (sum || prod) {
    c.type = "uint";
    c.load = "uint(" + widen + ")";
    c.ident = prod ? "1u" : "0u";
    c.combine = prod ? "((a) * (b))" : "((a) + (b))";
    if (subgroups) c.sg = prod ? "subgroupMul(v)" : "subgroupAdd(v)";
    c.finish = S + "(" + (sgn ? "int(a)" : "(a)") + ")";
  } else {
    c.type = sgn ? "int" : "uint";
    c.load = widen;
    c.ident = sgn ? (max ? "int(0x80000000u)" : "0x7fffffff") : (max ? "0u" : "0xffffffffu");
    c.combine = max ? "max((a), (b))" : "min((a), (b))";
    if (subgroups) c.sg = max ? "subgroupMax(v)" : "subgroupMin(v)";
    c.finish = S + "(a)";
  }
  return c;
}

void lower_reduce(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const auto& g = std::get<plan::ReduceGeom>(st.geom);
  const DType t = st.in.at(0).dtype;
  const plan::TensorRef& out = st.out.at(0);
  // Kept and reduced groups with their strides in the (row-major) input.
  plan::ReduceWalk walk = plan::reduce_walk(st, "Vulkan");
  std::vector<uint32_t>&kd = walk.kept_dims, &ks = walk.kept_strides, &rd = walk.reduced_dims, &rs = walk.reduced_strides;
  const bool rf = walk.row_first;
  const uint32_t wg = workgroup(cx.info());
  const uint32_t outputs = walk.outputs, count = walk.count;
  uint32_t ty;
  if (rf) {
    ty = line_threads(count, wg);
  } else {
    const uint32_t tx = std::clamp<uint32_t>(pow2_ceil(kd.back()), 1, std::min<uint32_t>(32, wg));
    ty = wg / tx;
  }
  const ReduceCode c = reduce_code(g.kind, t, cx.info().subgroup_arith);
  std::vector<DType> dtypes{t};
  if (c.wide) dtypes.push_back(DType::I64);
  std::string src = prelude(cx, dtypes, !c.sg.empty());
  src += glsl_buffer(0, "X", t, true) + glsl_buffer(1, "Y", t, false);
  src += define("NK", std::to_string(kd.size())) + define("NR", std::to_string(rd.size())) + define("RF", rf ? "1" : "0");
  src += define("A", c.type) + define("LOADA(i)", c.load) + define("IDENT", c.ident) + define("COMBINE(a, b)", c.combine) +
         define("FINISH(a)", c.finish);
  src += group_reduce("red", c.type, c.combine, c.sg);
  src += ksrc::kReduce;
  const Operand x = cx.in(st.in.at(0)), y = cx.out(out);
  std::vector<uint32_t> push{x.elem(dtype_size(t)), y.elem(dtype_size(t)), outputs, count, ty};
  for (auto* v : {&kd, &ks, &rd, &rs}) {
    v->resize(4, 0);
    push.insert(push.end(), v->begin(), v->end());
  }
  const uint32_t tx = wg / ty;
  cx.dispatch(Kernel{"reduce", src}, {x, y}, push, cx.groups_1d((uint64_t{outputs} + tx - 1) / tx, 1));
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
  const bool sg = cx.info().subgroup_arith;
  std::string src = prelude(cx, {t}, sg);
  src += glsl_buffer(0, "X", t, true) + glsl_buffer(1, "Y", t, false);
  src += define("RF", rf ? "1" : "0") + define("LOG", log ? "1" : "0") + define("CACHE", std::to_string(kCache));
  src += define("LOADF(i)", glsl_load(t, "X.data[i]")) + define("STOREF(i, v)", "Y.data[i] = " + glsl_store(t, "(v)"));
  src += group_reduce("red_max", "float", "(((b) > (a) || isnan(b)) ? (b) : (a))", sg ? "subgroupMax(v)" : "");
  src += group_reduce("red_sum", "float", "((a) + (b))", sg ? "subgroupAdd(v)" : "");
  src += ksrc::kSoftmax;
  const Operand x = cx.in(st.in.at(0)), y = cx.out(st.out.at(0));
  const uint32_t tx = wg / ty;
  cx.dispatch(Kernel{log ? "log_softmax" : "softmax", src}, {x, y},
              {x.elem(dtype_size(t)), y.elem(dtype_size(t)), cols, axis, inner, ty},
              cx.groups_1d((uint64_t{cols} + tx - 1) / tx, 1));
}

// ---- norms ----

void lower_norm(LowerContext& cx, const plan::Step& st, const plan::NormWork& n) {
  const std::string what = step_label(st);
  const DType t = st.in.at(0).dtype;
  const bool f64 = t == DType::F64;
  const std::string A = f64 ? "double" : "float";
  const uint32_t wg = workgroup(cx.info());
  const uint32_t rows = u32(n.rows, what), len = u32(n.len, what);
  const uint32_t ty = line_threads(len, wg);
  const bool sg = cx.info().subgroup_arith && !f64;
  std::string src = prelude(cx, {t}, sg);
  // Bindings: x, [residual], gamma, [beta], y.
  std::vector<Operand> bind{cx.in(st.in.at(0))};
  std::string push = "layout(push_constant) uniform Push { uint ox;";
  int b = 0;
  src += glsl_buffer(b++, "X", t, true);
  if (n.res) {
    src += glsl_buffer(b++, "R", t, true);
    bind.push_back(cx.in(st.in.at(1)));
    push += " uint orr;";
  }
  const size_t gi = n.res ? 2 : 1;
  src += glsl_buffer(b++, "G", t, true);
  bind.push_back(cx.in(st.in.at(gi)));
  push += " uint og;";
  if (n.beta) {
    src += glsl_buffer(b++, "B", t, true);
    bind.push_back(cx.in(st.in.at(gi + 1)));
    push += " uint ob;";
  }
  src += glsl_buffer(b++, "Y", t, false);
  bind.push_back(cx.out(st.out.at(0)));
  push += " uint oy; uint rows, len, ty, gmod, gmul, gdiv, eps_lo, eps_hi; } p;\n";
  src += push;
  const std::string lx = A + "(" + glsl_load(t, "X.data[p.ox + (i)]") + ")";
  const std::string lv =
      n.res ? A + "(" + codegen::glsl_language().round(t, glsl_load(t, "X.data[p.ox + (i)]") + " + " +
                                                               glsl_load(t, "R.data[p.orr + (i)]")) + ")"
            : lx;
  src += define("A", A) + define("RMS", n.rms ? "1" : "0") + define("BETA", n.beta ? "1" : "0") +
         define("CACHE", std::to_string(kCache));
  src += define("LOADV(i)", lv) + define("LOADG(i)", A + "(" + glsl_load(t, "G.data[p.og + (i)]") + ")");
  if (n.beta) src += define("LOADB(i)", A + "(" + glsl_load(t, "B.data[p.ob + (i)]") + ")");
  src += define("STOREY(i, v)", "Y.data[p.oy + (i)] = " + glsl_store(t, "(v)"));
  src += define("EPS", f64 ? "packDouble2x32(uvec2(p.eps_lo, p.eps_hi))" : "uintBitsToFloat(p.eps_lo)");
  src += group_reduce("red_sum", A, "((a) + (b))", sg ? "subgroupAdd(v)" : "");
  src += ksrc::kNorm;
  std::vector<uint32_t> pc;
  for (size_t i = 0; i < bind.size(); ++i) pc.push_back(bind[i].elem(dtype_size(t)));
  uint32_t eps_lo, eps_hi = 0;
  if (f64) {
    uint64_t bits = std::bit_cast<uint64_t>(n.eps);
    eps_lo = static_cast<uint32_t>(bits), eps_hi = static_cast<uint32_t>(bits >> 32);
  } else {
    eps_lo = float_bits(static_cast<float>(n.eps));
  }
  pc.insert(pc.end(), {rows, len, ty, u32(n.gmod, what), u32(n.gmul, what), u32(n.gdiv, what), eps_lo, eps_hi});
  const uint32_t per = wg / ty;
  const std::string name = std::string(n.rms ? "rms_norm" : "layer_norm") + (n.res ? "_residual" : "");
  cx.dispatch(Kernel{name, src}, bind, pc, cx.groups_1d((uint64_t{rows} + per - 1) / per, 1));
}

// ---- FusedSwiGLU ----

void lower_swiglu(LowerContext& cx, const plan::Step& st, bool gate_first) {
  const std::string what = step_label(st);
  const auto& g = std::get<plan::AxisGeom>(st.geom);
  const DType t = st.in.at(0).dtype;
  const uint32_t wg = workgroup(cx.info());
  const uint32_t n = u32(g.out_axis, what), total = u32(g.outer * g.out_axis, what);
  std::string src = prelude(cx, {t}, false);
  src += glsl_buffer(0, "X", t, true) + glsl_buffer(1, "Y", t, false);
  src += define("LOADF(i)", glsl_load(t, "X.data[i]")) + define("STOREF(i, v)", "Y.data[i] = " + glsl_store(t, "(v)"));
  src += define("ROUNDF(v)", codegen::glsl_language().round(t, "(v)"));
  src += ksrc::kSwiglu;
  const Operand x = cx.in(st.in.at(0)), y = cx.out(st.out.at(0));
  cx.dispatch(Kernel{"swiglu", src}, {x, y},
              {x.elem(dtype_size(t)), y.elem(dtype_size(t)), total, n, gate_first ? 0u : n, gate_first ? n : 0u},
              cx.groups_1d(total, wg));
}

// ---- claims ----

bool kind(std::string_view name) { return plan::rows_claims_kind(name); }

bool node(const Graph& g, const Node& n, const DeviceInfo* info, std::string* why) {
  if (!plan::rows_claims_dtypes_agree(g, n, "Vulkan", why)) return false;
  const std::string name = op_name(n.op);
  const DType t = g.shape(n.inputs.at(0)).dtype;
  if (const auto* r = std::get_if<ops::Reduce>(&n.op)) {
    if (g.shape(n.inputs[0]).rank() > 8) return refuse(why, "the Vulkan reduce supports inputs of rank <= 8");
    const bool minmax = r->kind == ReduceKind::Max || r->kind == ReduceKind::Min;
    if (t == DType::Bool) return minmax ? true : refuse(why, "Vulkan reduce of bool is Max (any) or Min (all) only");
    if (is_float(t)) return true;
    if (!is_int_dtype(t)) return refuse(why, std::string("the Vulkan reduce has no kernel for ") + dtype_name(t));
    if (r->kind == ReduceKind::Mean && info && !info->int64)
      return refuse(why, "a Vulkan integer mean sums in 64 bits; the device " + info->name + " has no shaderInt64");
    return true;
  }
  if (std::holds_alternative<ops::Softmax>(n.op) || std::holds_alternative<ops::LogSoftmax>(n.op) ||
      std::holds_alternative<ops::FusedSwiGLU>(n.op)) {
    if (is_row_float(t)) return true;
    if (t == DType::F64)
      return refuse(why, "Vulkan " + name + " in f64 needs a double exp, which GLSL does not have; run it on the CPU");
    return refuse(why, "Vulkan " + name + " needs f32, f16 or bf16");
  }
  if (!is_float(t)) return refuse(why, "Vulkan " + name + " needs f32, f16, bf16 or f64");
  return plan::rows_claims_attributes(g, n, why);
}

}  // namespace

const FamilyClaims kRowsClaims{kind, node};

void lower_rows(LowerContext& cx, const plan::Step& st) {
  check_sizes(st);
  const plan::RowsWork w = plan::rows_work(st, "Vulkan");
  if (std::holds_alternative<plan::ReduceWork>(w)) return lower_reduce(cx, st);
  if (const auto* s = std::get_if<plan::SoftmaxWork>(&w)) return lower_softmax(cx, st, s->log);
  if (const auto* n = std::get_if<plan::NormWork>(&w)) return lower_norm(cx, st, *n);
  lower_swiglu(cx, st, std::get<plan::SwiGLUWork>(w).gate_first);
}

}  // namespace rlx::vulkan
