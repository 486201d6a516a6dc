// The Select, Scan, Scatter and Random families on Vulkan: their claims, the step dispatch,
// and ArgMax / ArgMin, TopK and Sample (kernels/select.h). Cumsum: lower_scan.cpp, ScatterAdd:
// lower_scatter.cpp, RngUniform / RngNormal: lower_random.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/vulkan/kernels/select.h"
#include "backends/vulkan/lower_select.h"
#include "codegen/language.h"
#include "rlx/error.h"

namespace rlx::vulkan {

std::string select_fill(std::string src, const std::vector<std::pair<std::string, std::string>>& subs) {
  for (const auto& [k, v] : subs) src = codegen::replace_all(std::move(src), "{" + k + "}", v);
  return src;
}

void require_32bit(const std::string& what, int64_t n, const std::string& of) {
  plan::select_require_32bit(what, "Vulkan", n, of);
}

namespace {

constexpr uint32_t kWg = kSelectWorkgroup;

bool is_float_small(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// The compare type of dtype t and the GLSL expression of element `i` of binding `buf` in it.
std::string cmp_type(DType t) {
  if (is_float_small(t)) return "float";
  switch (t) {
    case DType::F64: return "double";
    case DType::I64: return "int64_t";
    case DType::I8:
    case DType::I16:
    case DType::I32: return "int";
    default: return "uint";  // u8, u32, bool
  }
}
std::string cmp_load(DType t, const std::string& buf) {
  const std::string raw = buf + ".data[i]";
  if (is_float_small(t)) return glsl_load(t, raw);
  return cmp_type(t) + "(" + raw + ")";
}
// The rank key (kernels/select.h) of a compare-type value `v`, its type and bits.
std::string key_expr(DType t) {
  if (is_float_small(t)) return "rlx_fkey(v)";
  if (t == DType::F64) return "rlx_dkey(v)";
  if (t == DType::I64) return "(uint64_t(v) ^ (uint64_t(1) << 63))";
  if (t == DType::I8 || t == DType::I16 || t == DType::I32) return "(uint(v) ^ 0x80000000u)";
  return "uint(v)";
}
bool key64(DType t) { return t == DType::F64 || t == DType::I64; }

std::string kernel_prelude(const std::vector<DType>& dtypes, bool subgroups) {
  return glsl_header(dtypes, subgroups) + "layout(local_size_x = 256) in;\n";
}

void lower_arg_reduce(LowerContext& cx, const plan::Step& st) {
  const bool is_max = std::holds_alternative<ops::ArgMax>(st.op);
  const bool last = is_max ? std::get<ops::ArgMax>(st.op).select_last : std::get<ops::ArgMin>(st.op).select_last;
  const plan::ArgReduceWork g = plan::arg_reduce_work(st, "Vulkan");
  if (g.tiles == 0) return;
  const DType t = st.in.at(0).dtype;
  const uint32_t ti = g.ti;
  std::string src = kernel_prelude({t, DType::I64}, false) + glsl_dtype_helpers({t}) + glsl_buffer(0, "x", t, true) +
                    glsl_buffer(1, "y", DType::I64, false);
  src += "#define CT " + cmp_type(t) + "\n#define TI " + std::to_string(ti) + "u\n";
  src += "#define LOADC(i_) (" + codegen::replace_all(cmp_load(t, "x"), "x.data[i]", "x.data[i_]") + ")\n";
  src += std::string("#define ISNAN(v) ") + (is_float(t) ? "isnan(v)" : "false") + "\n";
  src += ksrc::kArgReduce;
  const Operand x = cx.in(st.in.at(0)), y = cx.out(st.out.at(0));
  const uint32_t tiles = static_cast<uint32_t>(g.tiles);
  cx.dispatch(Kernel{"arg_reduce", src}, {x, y},
              {x.elem(dtype_size(t)), y.elem(8), static_cast<uint32_t>(g.outer), static_cast<uint32_t>(g.len),
               static_cast<uint32_t>(g.inner), is_max ? 1u : 0u, last ? 1u : 0u},
              cx.groups_1d(tiles, 1));
}

void lower_topk(LowerContext& cx, const plan::Step& st) {
  const plan::TopKWork g = plan::topk_work(st, "Vulkan");
  if (g.outer * g.inner == 0) return;
  const DType t = st.in.at(0).dtype;
  const bool wide = key64(t);
  const uint32_t p2 = g.slots;
  std::string src = kernel_prelude({t, DType::I64}, cx.info().subgroup_arith) + glsl_dtype_helpers({t});
  if (cx.info().subgroup_arith) src += "#define SUBGROUPS 1\n";
  src += glsl_buffer(0, "x", t, true) + glsl_buffer(1, "vals", t, false) + glsl_buffer(2, "idxs", DType::I64, false);
  src += "layout(push_constant) uniform P { uint ox; uint ov; uint oi; uint outer; uint len; uint inner; uint k; "
         "uint largest; } pc;\n";
  src += std::string("#define KT ") + (wide ? "uint64_t" : "uint") + "\n#define KBITS " + (wide ? "64" : "32") +
         "\n#define P2 " + std::to_string(p2) + "u\n";
  src += ksrc::kKeys;
  src += "KT key_of(uint rb, uint j) {\n  const uint i = rb + j * pc.inner;\n  const " + cmp_type(t) + " v = " +
         cmp_load(t, "x") + ";\n  const KT key = " + key_expr(t) + ";\n  return pc.largest != 0u ? key : ~key;\n}\n";
  src += std::string(ksrc::kWgScan) + ksrc::kRadix + ksrc::kTopK;
  const Operand x = cx.in(st.in.at(0)), vals = cx.out(st.out.at(0)), idxs = cx.out(st.out.at(1));
  cx.dispatch(Kernel{"topk", src}, {x, vals, idxs},
              {x.elem(dtype_size(t)), vals.elem(dtype_size(t)), idxs.elem(8), static_cast<uint32_t>(g.outer),
               static_cast<uint32_t>(g.len), static_cast<uint32_t>(g.inner), static_cast<uint32_t>(g.k),
               g.largest ? 1u : 0u},
              cx.groups_1d(g.outer * g.inner, 1));
}

constexpr const char* kSampleMain = R"GLSL(
shared uint sbk[256];
shared uint sbi[256];
shared uint snan;
shared double sp[P2];
void main() {
  const uint lid = gl_LocalInvocationID.x;
  const double temperature = packDouble2x32(uvec2(pc.t_lo, pc.t_hi));
  const double top_p = packDouble2x32(uvec2(pc.p_lo, pc.p_hi));
  const uint64_t offv = uint64_t(offs.data[pc.ooff]);
  const uvec2 offset = uvec2(uint(offv), uint(offv >> 32));
  for (uint row = gl_WorkGroupID.x; row < pc.rows; row += gl_NumWorkGroups.x) {
    const uint rb = pc.ox + row * pc.len;
    if (lid == 0u) snan = 0u;
    barrier();
    // The maximum (first index) and the NaN check.
    uint bk = 0u, bi = 0xffffffffu;
    bool nan = false;
    for (uint j = lid; j < pc.len; j += 256u) {
      const float v = LOADF(rb + j);
      if (isnan(v)) nan = true;
      const uint k = rlx_fkey(v);
      if (bi == 0xffffffffu || k > bk) { bk = k; bi = j; }
    }
    if (nan) atomicOr(snan, 1u);
    sbk[lid] = bk;
    sbi[lid] = bi;
    barrier();
    for (uint step = 128u; step > 0u; step >>= 1) {
      if (lid < step) {
        const uint ok = sbk[lid + step], oi = sbi[lid + step];
        if (oi != 0xffffffffu && (sbi[lid] == 0xffffffffu || ok > sbk[lid] || (ok == sbk[lid] && oi < sbi[lid]))) {
          sbk[lid] = ok;
          sbi[lid] = oi;
        }
      }
      barrier();
    }
    const bool any_nan = snan != 0u;
    const uint arg = sbi[0];
    const float mx = rlx_key_float(sbk[0]);
    barrier();
    if (any_nan) {
      if (lid == 0u) { atomicMax(err.code, 4); outs.data[pc.oo + row] = int64_t(0); }
      continue;
    }
    if (isinf(mx) && mx < 0.0) {  // before the greedy return: every mode rejects an all -inf row
      if (lid == 0u) { atomicMax(err.code, 5); outs.data[pc.oo + row] = int64_t(0); }
      continue;
    }
    if (temperature == 0.0LF) {
      if (lid == 0u) outs.data[pc.oo + row] = int64_t(arg);
      continue;
    }
    const bool inf_max = isinf(mx);
    const double mxd = double(mx);
    rlx_gather_top(rb, pc.len, pc.kcount);
    for (uint s = lid; s < pc.kcount; s += 256u) {
      const float v = rlx_key_float(rlx_skey[s]);
      precise double d = (double(v) - mxd) / temperature;
      sp[s] = inf_max ? (v == mx ? 1.0LF : 0.0LF) : rlx_exp_d(d);
    }
    barrier();
    if (lid == 0u) {
      // The CPU's walk over the kept tokens in rank order (same summation order).
      precise double mass = 0.0LF;
      for (uint i = 0u; i < pc.kcount; ++i) mass += sp[i];
      uint n = pc.kcount;
      if (top_p < 1.0LF) {
        precise double target = top_p * mass;
        precise double cum = 0.0LF;
        for (uint i = 0u; i < pc.kcount; ++i) {
          cum += sp[i];
          if (cum >= target) { n = i + 1u; mass = cum; break; }
        }
      }
      const uvec4 bits = rlx_philox_block(uvec2(pc.seed_lo, pc.seed_hi), offset, row, 0u);
      const uint64_t v53 = ((uint64_t(bits.x) << 32) | uint64_t(bits.y)) >> 11;
      precise double target = double(v53) * (1.0LF / 9007199254740992.0LF) * mass;
      precise double cum = 0.0LF;
      uint tok = 0xffffffffu, last_positive = rlx_sidx[0];
      for (uint i = 0u; i < n; ++i) {
        if (sp[i] <= 0.0LF) break;  // rank order: the rest are zero too
        last_positive = rlx_sidx[i];
        cum += sp[i];
        if (target < cum) { tok = rlx_sidx[i]; break; }
      }
      outs.data[pc.oo + row] = int64_t(tok != 0xffffffffu ? tok : last_positive);
    }
    barrier();
  }
}
)GLSL";

void lower_sample(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const auto& op = std::get<ops::Sample>(st.op);
  const plan::TensorRef& logits = st.in.at(0);
  const DType t = logits.dtype;
  if (!is_float_small(t)) throw Error(what + ": Vulkan sample needs f32/f16/bf16 logits, not " + dtype_name(t));
  const auto& sg = std::get<plan::SampleGeom>(st.geom);
  if (sg.rows == 0) return;
  if (sg.vocab <= 0) throw Error(what + ": the vocabulary dim is 0; nothing can be sampled");
  require_32bit(what, logits.numel(), "the logits");
  const int64_t kept = op.temperature == 0 ? 1 : plan::sample_kept(op, sg.vocab);
  if (kept > kVulkanTopKMax)
    throw Error(what + ": Vulkan sample keeps at most " + std::to_string(kVulkanTopKMax) + " tokens (top_k in [1, " +
                std::to_string(kVulkanTopKMax) + "] or a vocabulary that small); this one keeps " + std::to_string(kept));
  const uint32_t p2 = plan::ranked_slots(kept);
  const bool sub = cx.info().subgroup_arith;
  std::string src = kernel_prelude({t, DType::I64, DType::F64}, sub) + glsl_dtype_helpers({t});
  if (sub) src += "#define SUBGROUPS 1\n";
  src += glsl_buffer(0, "x", t, true) + glsl_buffer(1, "outs", DType::I64, false) +
         glsl_buffer(2, "offs", DType::I64, true) +
         "layout(std430, set = 0, binding = 3) buffer Err { int code; } err;\n";
  src += "layout(push_constant) uniform P { uint ox; uint oo; uint ooff; uint rows; uint len; uint kcount; "
         "uint seed_lo; uint seed_hi; uint t_lo; uint t_hi; uint p_lo; uint p_hi; } pc;\n";
  src += "#define KT uint\n#define KBITS 32\n#define P2 " + std::to_string(p2) + "u\n";
  src += "#define LOADF(i_) (" + codegen::replace_all(glsl_load(t, "x.data[i]"), "x.data[i]", "x.data[i_]") + ")\n";
  src += ksrc::kKeys;
  src += "uint key_of(uint rb, uint j) { return rlx_fkey(LOADF(rb + j)); }\n";
  src += std::string(ksrc::kWgScan) + ksrc::kRadix + ksrc::kPhilox + ksrc::kDoubleMath + kSampleMain;
  const Operand x = cx.in(logits), out = cx.out(st.out.at(0));
  Operand off;
  if (st.in.size() > 1) {
    if (st.in[1].dtype != DType::I64 || st.in[1].numel() != 1)
      throw Error(what + ": the offset operand must be one i64 value");
    off = cx.in(st.in[1]);
  } else {
    off = cx.table({0u, 0u}, what + " zero offset");
  }
  const auto dbits = [](double d) {
    uint64_t u;
    std::memcpy(&u, &d, 8);
    return u;
  };
  const uint64_t tb = dbits(op.temperature), pb = dbits(op.top_p);
  cx.dispatch(Kernel{"sample", src}, {x, out, off, cx.error_flag()},
              {x.elem(dtype_size(t)), out.elem(8), off.elem(8), static_cast<uint32_t>(sg.rows),
               static_cast<uint32_t>(sg.vocab), static_cast<uint32_t>(kept), lo32(op.seed), hi32(op.seed), lo32(tb),
               hi32(tb), lo32(pb), hi32(pb)},
              cx.groups_1d(sg.rows, 1));
}

// ---- claims ----

bool kind(std::string_view n) {
  return plan::select_claims_kind(n) || plan::scan_claims_kind(n) || plan::scatter_claims_kind(n) ||
         plan::random_claims_kind(n);
}

bool node(const Graph& g, const Node& n, const DeviceInfo* info, std::string* why) {
  const std::string name = op_name(n.op);
  if (info && info->max_invocations < kWg)
    return refuse(why, "the Vulkan " + name + " kernels run 256 invocations per workgroup; " + info->name + " allows " +
                           std::to_string(info->max_invocations));
  plan::SelectDevice dev;
  if (info) {
    dev.f64 = info->float64;
    dev.shared_bytes = info->max_shared_bytes;
    dev.name = info->name;
  }
  return plan::select_family_claims_node("Vulkan", dev, g, n, why);
}

}  // namespace

const FamilyClaims kSelectClaims{kind, node};

bool lower_select_family(LowerContext& cx, const plan::Step& st) {
  if (std::holds_alternative<ops::ArgMax>(st.op) || std::holds_alternative<ops::ArgMin>(st.op)) {
    lower_arg_reduce(cx, st);
  } else if (std::holds_alternative<ops::TopK>(st.op)) {
    lower_topk(cx, st);
  } else if (std::holds_alternative<ops::Sample>(st.op)) {
    lower_sample(cx, st);
  } else if (std::holds_alternative<ops::Cumsum>(st.op)) {
    lower_cumsum(cx, st);
  } else if (std::holds_alternative<ops::ScatterAdd>(st.op)) {
    lower_scatter_add(cx, st);
  } else if (std::holds_alternative<ops::CacheWrite>(st.op)) {
    lower_cache_write(cx, st);
  } else if (std::holds_alternative<ops::RngUniform>(st.op) || std::holds_alternative<ops::RngNormal>(st.op)) {
    lower_rng(cx, st);
  } else {
    return false;
  }
  return true;
}

}  // namespace rlx::vulkan
