// The Select family on WebGPU: ArgMax / ArgMin, TopK and greedy Sample (temperature 0; a
// temperature > 0 needs the CPU's double-precision probabilities, which WGSL cannot compute, and
// is not claimed). The claims and the tiles come from plan/select_work.h (shared with Vulkan).
//
// Every value is one 32-bit word (codegen/lang_wgsl.cpp), so the rank key of an element is one
// u32 whatever its dtype: floats map -0 to +0 and every NaN to the largest key (NaN ranks above
// every number, as on the CPU), signed integers (i64 included, held in i32 words) flip the sign
// bit. Indices are written as i32 words (the storage of i64).
#include <algorithm>
#include <string>
#include <vector>

#include "backends/webgpu/lower.h"
#include "codegen/language.h"
#include "plan/gpu_claims.h"
#include "plan/select_work.h"
#include "rlx/error.h"

namespace rlx::webgpu {
namespace {

constexpr std::string_view kBackend = "WebGPU";

// The key of word `w` of dtype t (see above).
std::string key_fn(DType t) {
  std::string s = "fn key_of_word(w: u32) -> u32 {\n";
  if (is_float(t)) {
    s += "  if ((w & 0x7fffffffu) > 0x7f800000u) { return 0xffffffffu; }\n"
         "  if ((w & 0x7fffffffu) == 0u) { return 0x80000000u; }\n"
         "  return select(w | 0x80000000u, ~w, (w & 0x80000000u) != 0u);\n";
  } else if (is_signed_int(t)) {
    s += "  return w ^ 0x80000000u;\n";
  } else {
    s += "  return w;\n";
  }
  return s + "}\n";
}

// The class of a dtype's kernels (one pipeline each): float, signed or unsigned words.
std::string word_class(DType t) { return is_float(t) ? "float" : is_signed_int(t) ? "signed" : "unsigned"; }

// ---- ArgMax / ArgMin ----

// x [outer, len, inner] -> [outer, inner]: a workgroup takes TI columns (consecutive inner
// positions; a uniform) x S = 256 / TI lanes along the axis; lanes scan strided axis positions,
// then a tree in workgroup memory combines them. prefer(): NaN (the largest key of a float)
// ranks above every number for argmax and argmin; ties go to the first index, or the last.
const char* kArgReduce = R"(
const NONE = 0xffffffffu;
var<workgroup> sk: array<u32, 256>;
var<workgroup> si: array<u32, 256>;
// Whether (key k, index i) beats (b, bi).
fn prefer(k: u32, i: u32, b: u32, bi: u32) -> bool {
  let kn = IS_FLOAT && k == 0xffffffffu;
  let bn = IS_FLOAT && b == 0xffffffffu;
  if (kn || bn) {
    if (kn != bn) { return kn; }
    return select((i < bi), (i > bi), rlx_p.last != 0u);
  }
  if (k == b) { return select((i < bi), (i > bi), rlx_p.last != 0u); }
  return select((k < b), (k > b), rlx_p.is_max != 0u);
}
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let TI = rlx_p.ti;
  let S = 256u / TI;
  let c = lid % TI;
  let s = lid / TI;
  let ctiles = (rlx_p.inner + TI - 1u) / TI;
  let tiles = rlx_p.outer * ctiles;
  for (var tile = wid.x; tile < tiles; tile += nwg.x) {
    let o = tile / ctiles;
    let col = (tile % ctiles) * TI + c;
    var bk = 0u;
    var bi = NONE;
    if (col < rlx_p.inner) {
      for (var m = s; m < rlx_p.len; m += S) {
        let k = key_of_word(X((o * rlx_p.len + m) * rlx_p.inner + col));
        if (bi == NONE || prefer(k, m, bk, bi)) {
          bk = k;
          bi = m;
        }
      }
    }
    sk[lid] = bk;
    si[lid] = bi;
    workgroupBarrier();
    for (var step = S / 2u; step > 0u; step = step >> 1u) {
      if (s < step) {
        let other = lid + step * TI;
        if (si[other] != NONE && (si[lid] == NONE || prefer(sk[other], si[other], sk[lid], si[lid]))) {
          sk[lid] = sk[other];
          si[lid] = si[other];
        }
      }
      workgroupBarrier();
    }
    if (s == 0u && col < rlx_p.inner) { Y(o * rlx_p.inner + col) = si[lid]; }
    workgroupBarrier();
  }
}
)";

void lower_arg_reduce(LowerContext& cx, const plan::Step& st) {
  const bool is_max = std::holds_alternative<ops::ArgMax>(st.op);
  const bool last = is_max ? std::get<ops::ArgMax>(st.op).select_last : std::get<ops::ArgMin>(st.op).select_last;
  const plan::ArgReduceWork w = plan::arg_reduce_work(st, kBackend);
  if (w.tiles == 0) return;
  const DType t = st.in.at(0).dtype;
  const std::vector<Operand> ops{cx.in(st.in.at(0)), cx.out(st.out.at(0))};
  const Binds b = plan_binds(ops, false);
  std::string src = b.decls({"outer: u32", "len: u32", "inner: u32", "ti: u32", "is_max: u32", "last: u32"});
  src += "const IS_FLOAT = " + std::string(is_float(t) ? "true" : "false") + ";\n" + key_fn(t);
  src += "fn X(i: u32) -> u32 { return " + b.at(0, "i") + "; }\n";
  src += codegen::replace_all(kArgReduce, "Y(o * rlx_p.inner + col)", b.at(1, "o * rlx_p.inner + col"));
  cx.dispatch(Kernel{"arg_reduce_" + word_class(t), src}, ops,
              {static_cast<uint32_t>(w.outer), static_cast<uint32_t>(w.len), static_cast<uint32_t>(w.inner), w.ti,
               is_max ? 1u : 0u, last ? 1u : 0u},
              false, cx.groups_1d(static_cast<uint64_t>(w.tiles), 1));
}

// ---- TopK ----

// The ranked gather of one line (a workgroup): rlx_gather_top(rb, k) leaves the k first elements
// of the line in rank order (larger key first, ties: lower index first) in skey / sidx [0, k),
// the slots [k, p2) padded (key 0, index ~0) and sorted last. The k-th key comes from a radix
// select (4 passes of 8 bits over the line, counts in workgroup memory), then the elements above
// it and the first `rank` of its key (a workgroup scan per 256 in index order) fill the slots,
// and a bitonic sort over p2 (a uniform power of two) orders them.
const char* kRanked = R"(
const SLOTS = 1024u;
var<workgroup> cnt: array<atomic<u32>, 256>;
var<workgroup> skey: array<u32, SLOTS>;
var<workgroup> sidx: array<u32, SLOTS>;
var<workgroup> sh_u: u32;
var<workgroup> sh_v: u32;
var<workgroup> sh_count: atomic<u32>;
var<workgroup> scan_sh: array<u32, 256>;
// Exclusive prefix of v over the workgroup; the total is left in sh_v (read it with
// workgroupUniformLoad, a uniform value).
fn wg_exclusive(v: u32, lid: u32) -> u32 {
  scan_sh[lid] = v;
  workgroupBarrier();
  for (var d = 1u; d < 256u; d = d << 1u) {
    var add = 0u;
    if (lid >= d) { add = scan_sh[lid - d]; }
    workgroupBarrier();
    scan_sh[lid] += add;
    workgroupBarrier();
  }
  let incl = scan_sh[lid];
  if (lid == 255u) { sh_v = incl; }
  return incl - v;
}
// The key of the n-th element (1-based) in rank order, and its rank among the elements of that
// key (1-based, in index order); both uniform.
fn radix_nth(rb: u32, len: u32, n: u32, lid: u32) -> vec2<u32> {
  var prefix = 0u;
  var rem = n;
  for (var shift = 24i; shift >= 0i; shift -= 8i) {
    atomicStore(&cnt[lid], 0u);
    workgroupBarrier();
    let hi_mask = select(0xffffffffu << u32(shift + 8i), 0u, shift == 24i);
    for (var j = lid; j < len; j += 256u) {
      let k = key_at(rb, j);
      if ((k & hi_mask) == prefix) { atomicAdd(&cnt[(k >> u32(shift)) & 255u], 1u); }
    }
    workgroupBarrier();
    if (lid == 0u) {
      var d = 255u;
      for (; d > 0u; d--) {
        let c = atomicLoad(&cnt[d]);
        if (rem <= c) { break; }
        rem -= c;
      }
      sh_u = prefix | (d << u32(shift));
      sh_v = rem;
    }
    prefix = workgroupUniformLoad(&sh_u);
    rem = workgroupUniformLoad(&sh_v);
  }
  return vec2<u32>(prefix, rem);
}
fn ranks_after(ka: u32, ia: u32, kb: u32, ib: u32) -> bool { return ka < kb || (ka == kb && ia > ib); }
fn gather_top(rb: u32, len: u32, k: u32, p2: u32, lid: u32) {
  let nth = radix_nth(rb, len, k, lid);
  let kth = nth.x;
  let rank = nth.y;
  for (var s = lid; s < p2; s += 256u) {
    skey[s] = 0u;
    sidx[s] = 0xffffffffu;
  }
  if (lid == 0u) { atomicStore(&sh_count, 0u); }
  workgroupBarrier();
  for (var j = lid; j < len; j += 256u) {
    let key = key_at(rb, j);
    if (key > kth) {
      let slot = atomicAdd(&sh_count, 1u);  // exactly k - rank elements rank above the k-th key
      skey[slot] = key;
      sidx[slot] = j;
    }
  }
  workgroupBarrier();
  if (lid == 0u) { sh_u = atomicLoad(&sh_count); }
  let base = workgroupUniformLoad(&sh_u);
  // The first `rank` elements of key kth, in index order.
  var seen = 0u;
  for (var c0 = 0u; c0 < len && seen < rank; c0 += 256u) {
    let j = c0 + lid;
    let f = j < len && key_at(rb, j) == kth;
    let before = wg_exclusive(select(0u, 1u, f), lid);
    let total = workgroupUniformLoad(&sh_v);
    if (f && seen + before < rank) {
      skey[base + seen + before] = kth;
      sidx[base + seen + before] = j;
    }
    seen += total;
  }
  workgroupBarrier();
  for (var size = 2u; size <= p2; size = size << 1u) {
    for (var stride = size >> 1u; stride > 0u; stride = stride >> 1u) {
      for (var t = lid; t < p2 / 2u; t += 256u) {
        let a = 2u * stride * (t / stride) + (t % stride);
        let b = a + stride;
        let up = (a & size) == 0u;
        if (ranks_after(skey[a], sidx[a], skey[b], sidx[b]) == up) {
          let tk = skey[a];
          skey[a] = skey[b];
          skey[b] = tk;
          let ti = sidx[a];
          sidx[a] = sidx[b];
          sidx[b] = ti;
        }
      }
      workgroupBarrier();
    }
  }
}
)";

const char* kTopK = R"(
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let rows = rlx_p.outer * rlx_p.inner;
  for (var row = wid.x; row < rows; row += nwg.x) {
    let o = row / rlx_p.inner;
    let i = row % rlx_p.inner;
    let rb = o * rlx_p.len * rlx_p.inner + i;
    gather_top(rb, rlx_p.len, rlx_p.k, rlx_p.p2, lid);
    for (var r = lid; r < rlx_p.k; r += 256u) {
      let dst = (o * rlx_p.k + r) * rlx_p.inner + i;
      let src = sidx[r];
      VALS = X(rb + src * rlx_p.inner);
      IDXS = src;
    }
    workgroupBarrier();
  }
}
)";

void lower_topk(LowerContext& cx, const plan::Step& st) {
  const plan::TopKWork w = plan::topk_work(st, kBackend);
  if (w.outer * w.inner == 0) return;
  const DType t = st.in.at(0).dtype;
  const std::vector<Operand> ops{cx.in(st.in.at(0)), cx.out(st.out.at(0)), cx.out(st.out.at(1))};
  const Binds b = plan_binds(ops, false);
  std::string src = b.decls({"outer: u32", "len: u32", "inner: u32", "k: u32", "p2: u32", "largest: u32"}) + key_fn(t);
  src += "fn X(i: u32) -> u32 { return " + b.at(0, "i") + "; }\n";
  src += "fn key_at(rb: u32, j: u32) -> u32 {\n  let k = key_of_word(X(rb + j * rlx_p.inner));\n"
         "  return select(~k, k, rlx_p.largest != 0u);\n}\n";
  src += kRanked;
  src += codegen::replace_all(codegen::replace_all(kTopK, "VALS", b.at(1, "dst")), "IDXS", b.at(2, "dst"));
  cx.dispatch(Kernel{"topk_" + word_class(t), src}, ops,
              {static_cast<uint32_t>(w.outer), static_cast<uint32_t>(w.len), static_cast<uint32_t>(w.inner),
               static_cast<uint32_t>(w.k), w.slots, w.largest ? 1u : 0u},
              false, cx.groups_1d(static_cast<uint64_t>(w.outer * w.inner), 1));
}

// ---- Sample (greedy) ----

// One workgroup per row: the first index of the largest logit. A NaN logit (kErrSampleNaN) or a
// row of -inf only (kErrSampleAllNegInf) is reported and writes 0, as the CPU raises.
const char* kSampleGreedy = R"(
var<workgroup> sk: array<u32, 256>;
var<workgroup> si: array<u32, 256>;
var<workgroup> snan: atomic<u32>;
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var row = wid.x; row < rlx_p.rows; row += nwg.x) {
    let rb = row * rlx_p.len;
    if (lid == 0u) { atomicStore(&snan, 0u); }
    workgroupBarrier();
    var bk = 0u;
    var bi = 0xffffffffu;
    var nan = false;
    for (var j = lid; j < rlx_p.len; j += 256u) {
      let w = X(rb + j);
      if ((w & 0x7fffffffu) > 0x7f800000u) { nan = true; }
      let k = key_of_word(w);
      if (bi == 0xffffffffu || k > bk) {
        bk = k;
        bi = j;
      }
    }
    if (nan) { atomicOr(&snan, 1u); }
    sk[lid] = bk;
    si[lid] = bi;
    workgroupBarrier();
    for (var step = 128u; step > 0u; step = step >> 1u) {
      if (lid < step) {
        let ok = sk[lid + step];
        let oi = si[lid + step];
        if (oi != 0xffffffffu && (si[lid] == 0xffffffffu || ok > sk[lid] || (ok == sk[lid] && oi < si[lid]))) {
          sk[lid] = ok;
          si[lid] = oi;
        }
      }
      workgroupBarrier();
    }
    if (lid == 0u) {
      if (atomicLoad(&snan) != 0u) {
        atomicMax(&rlx_err, ERR_NAN);
        OUT = 0u;
      } else if (sk[0] == 0x007fffffu) {  // the key of -inf
        atomicMax(&rlx_err, ERR_NEG_INF);
        OUT = 0u;
      } else {
        OUT = si[0];
      }
    }
    workgroupBarrier();
  }
}
)";

void lower_sample(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const auto& op = std::get<ops::Sample>(st.op);
  const DType t = st.in.at(0).dtype;
  if (op.temperature != 0 || !is_float(t))
    throw Error(what + ": WebGPU sample runs temperature 0 (greedy) over float logits only (a temperature > 0 needs the "
                       "CPU's double-precision probabilities)");
  const auto& sg = std::get<plan::SampleGeom>(st.geom);
  if (sg.rows == 0) return;
  if (sg.vocab <= 0) throw Error(what + ": the vocabulary dim is 0; nothing can be sampled");
  plan::select_require_32bit(what, kBackend, st.in.at(0).numel(), "the logits");
  const std::vector<Operand> ops{cx.in(st.in.at(0)), cx.out(st.out.at(0))};
  const Binds b = plan_binds(ops, true);
  std::string src = b.decls({"rows: u32", "len: u32"}) + key_fn(t);
  src += "fn X(i: u32) -> u32 { return " + b.at(0, "i") + "; }\n";
  src += codegen::replace_all(
      codegen::replace_all(codegen::replace_all(kSampleGreedy, "OUT", b.at(1, "row")), "ERR_NAN",
                           std::to_string(codegen::kErrSampleNaN) + "i"),
      "ERR_NEG_INF", std::to_string(codegen::kErrSampleAllNegInf) + "i");
  cx.dispatch(Kernel{"sample_greedy", src}, ops, {static_cast<uint32_t>(sg.rows), static_cast<uint32_t>(sg.vocab)}, true,
              cx.groups_1d(static_cast<uint64_t>(sg.rows), 1));
}

bool kind(std::string_view n) { return plan::select_claims_kind(n); }

bool node(const Graph& g, const Node& n, const DeviceInfo* info, std::string* why) {
  plan::SelectDevice dev;
  dev.f64 = false;  // WGSL has no f64
  if (info) {
    dev.shared_bytes = info->limits.max_compute_workgroup_storage_size;
    dev.name = info->name;
    if (info->limits.max_compute_invocations_per_workgroup < plan::kSelectWorkgroup)
      return refuse(why, "the WebGPU " + std::string(op_name(n.op)) + " kernels run 256 invocations per workgroup; " + info->name +
                             " allows " + std::to_string(info->limits.max_compute_invocations_per_workgroup));
  }
  if (std::holds_alternative<ops::TopK>(n.op)) {
    // The ranked gather holds 1024 slots of key and index whatever k (one pipeline per dtype class).
    const uint64_t need = plan::radix_shared_bytes(static_cast<uint32_t>(plan::kTopKMax), 4) + 1024 + 16;
    if (info && need > info->limits.max_compute_workgroup_storage_size)
      return refuse(why, "WebGPU topk needs " + std::to_string(need) + " bytes of workgroup memory; " + info->name +
                             " has " + std::to_string(info->limits.max_compute_workgroup_storage_size));
  }
  return plan::select_family_claims_node(kBackend, dev, g, n, why);
}

}  // namespace

const FamilyClaims kSelectClaims{kind, node};

void lower_select(LowerContext& cx, const plan::Step& st) {
  if (std::holds_alternative<ops::ArgMax>(st.op) || std::holds_alternative<ops::ArgMin>(st.op)) return lower_arg_reduce(cx, st);
  if (std::holds_alternative<ops::TopK>(st.op)) return lower_topk(cx, st);
  if (std::holds_alternative<ops::Sample>(st.op)) return lower_sample(cx, st);
  throw Error(step_label(st) + ": the WebGPU select family has no kernel for this op");
}

}  // namespace rlx::webgpu
