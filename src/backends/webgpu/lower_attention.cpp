// Attention on WebGPU: a flash-style WGSL kernel. The query rows of one KV head are the pairs
// (query row i, head h of its GQA group), R = i * group + (h - kv_head * group), so the heads that
// share a KV head read each K/V tile once. One workgroup per (batch, KV head, block of BR such
// rows) (a grid-stride loop over them: any number of blocks); per tile of BC keys the K and V rows
// go to workgroup memory, the BR x BC scores are computed over the workgroup, and an online
// softmax in f32 (running max and sum per row, reduced over the TC = WG / BR invocations of the
// row) rescales the output accumulators, which live in registers (BR x head_dim over the
// workgroup) and are written once at the end. Decode (one query row): the rows are the group's
// heads and the key tile is the largest, so a tile's keys are scored by all invocations at once;
// when the workgroups are few and the KV long, the keys are split over workgroups and a combine
// dispatch merges the splits' partial rows.
//
// Exactly the CPU oracle's score pipeline (backends/cpu/attention_core.h): s = (q . k) * scale
// (score_scale, or 1/sqrt(head_dim)); a key outside the row's causal / sliding-window range or
// dropped by the Custom keep mask (nonzero keeps, NaN keeps), or past the row's position (the
// decoder's Positions mask: key j visible when j <= positions[i]; the keys of a block end after
// its rows' largest position, a run-time length) is -inf; then the softcap
// (softcap * tanh(s / softcap)), then the additive Bias (broadcast strides); a row with no kept
// key (or whose kept keys all score -inf) outputs zeros; a NaN score does not raise the row max
// and makes the row NaN. GQA: query head h reads kv head h / (num_heads / num_kv_heads).
#include <algorithm>
#include <bit>
#include <optional>
#include <string>

#include "backends/webgpu/lower.h"
#include "codegen/language.h"
#include "plan/attention_work.h"
#include "rlx/error.h"

namespace rlx::webgpu {
namespace {

constexpr int64_t kWg = 64;             // invocations per workgroup
constexpr int64_t kMaxRows = 16;        // BR
constexpr int64_t kMaxAcc = 32;         // output accumulators per invocation (BR x head_dim <= 32 x WG)
// Decode (few units, a long KV): the keys are split over workgroups until about kTargetGroups
// run (two per SM of a 132-SM GPU), each split at least one key tile long, so a split is one or
// two tiles: its K/V loads are all in flight at once instead of walking the KV tile by tile.
constexpr int64_t kTargetGroups = 256;  // workgroups below which a decode splits its keys
constexpr int64_t kMinSplitKeys = 64;   // a KV shorter than two of these is not split; a split is a
                                        // key tile (at least 32 keys) or more
constexpr int64_t kMaxSplits = 64;
// Workgroups of one dispatch: enough to fill any GPU; the kernels loop over more units (a CPU
// adapter pays per workgroup).
constexpr int64_t kMaxGroups = 8192;

bool wgsl_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

struct Tiles {
  int64_t br = 1, bc = 4;
  bool alias = false;  // the V tile loaded over the K tile once the scores are done
};

// Words of workgroup memory the tiles take: Q [BR][D], K [BC][D + 1] (rows padded by a word, so
// the invocations scoring consecutive keys read different banks), V [BC][D] (over K when
// aliased), P [BR][BC].
int64_t tile_words(int64_t d, const Tiles& t) {
  return t.br * d + t.bc * (d + 1) + (t.alias ? 0 : t.bc * d) + t.br * t.bc;
}

// The workgroup memory pool of the kernel (in f32 words): the device's limit (up to 32 KiB) less
// the reduction scratch, the same for every shape so that one pipeline serves them all.
int64_t pool_words(uint64_t limit) {
  return static_cast<int64_t>(std::min<uint64_t>(limit, 32768) / 4) - (kWg + 3 * kMaxRows);
}

// The largest row block (at most the next power of two of `rows`, a KV head's query rows, up to
// 16), then the largest key tile, whose tiles fit the pool and whose accumulators fit kMaxAcc per
// invocation. `decode` (one query row, keys split over workgroups): a tile with K and V side by
// side first (both loads in flight together; a split is a tile or two, so the smaller tile costs
// no extra pass over the keys), then the aliased ones.
std::optional<Tiles> pick_tiles(int64_t d, int64_t rows, uint64_t limit, bool decode = false) {
  const int64_t pool = pool_words(limit);
  int64_t cap = 1;
  while (cap < rows && cap < kMaxRows) cap *= 2;
  for (int64_t br = cap; br >= 1; br /= 2) {
    if (br * d > kMaxAcc * kWg) continue;
    for (int pass = 0; pass < (decode ? 2 : 1); ++pass)
      for (int64_t bc : {64, 32, 16, 8, 4})
        for (bool alias : {false, true}) {
          if (decode && alias != (pass == 1)) continue;
          const Tiles t{br, bc, alias};
          if (tile_words(d, t) <= pool) return t;
        }
  }
  return std::nullopt;
}

uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }
uint32_t f32_bits(double v) { return std::bit_cast<uint32_t>(static_cast<float>(v)); }

void check_index(const plan::Step& st, const char* what, int64_t n) {
  plan::check_attention_index(st, what, n, "WebGPU");
}

// The kernel after the declarations and helpers (ld_q/ld_k/ld_v(u32) -> f32, st_o(u32, f32),
// keep_at(u32) -> bool, bias_at(u32) -> f32). Constants: D, BR, BC, WG, TC, NACC, MASK, ALIAS,
// SPLIT. SPLIT: the workgroup takes only keys [split * split_len, (split + 1) * split_len) of
// its rows (split = the unit's last coordinate) and writes each row's unnormalized output, max
// and sum to the partials: [split][(b * heads + h) * q_len + i][D + 2]. The tile sizes come from
// c_d(), c_br(), c_bc(), c_tc(), c_nacc(), c_alias(): literals (knob webgpu_attn_baked; by default
// on every adapter but CPU ones: the compiler unrolls the loops over them and keeps the
// accumulators in registers, 3.5x faster on an H200), or uniform parameters (one pipeline serves
// every size; a CPU adapter compiles each baked pipeline for seconds).
const char* kFlash = R"(
var<workgroup> pool: array<f32, POOL_WORDS>;  // Q tile [BR][D], K tile [BC][D + 1], V tile [BC][D] (or over K), P [BR][BC]
var<workgroup> red: array<f32, WG>;
var<workgroup> alpha_s: array<f32, MAX_BR>;
var<workgroup> m_s: array<f32, MAX_BR>;
var<workgroup> l_s: array<f32, MAX_BR>;

fn is_ninf(x: f32) -> bool { return bitcast<u32>(x) == 0xff800000u; }
fn attn_tanh(x: f32) -> f32 {
  let a = abs(x);
  if (a < 0.004f) { return x; }
  let e = exp(-2.0f * a);
  let t = (1.0f - e) / (1.0f + e);
  return select(t, -t, x < 0.0f);
}
// Keys [lo, hi) query row i of batch b may see before the per-key masks (mask 5: the keys up to
// the row's position).
fn row_keys(b: u32, i: u32) -> vec2<i32> {
  let kv = i32(rlx_p.kv_len);
  let pos = kv - i32(rlx_p.q_len) + i32(i);
  var lo = 0i;
  var hi = kv;
  if (rlx_p.mask == 1u || rlx_p.mask == 2u) { hi = clamp(pos + 1i, 0i, kv); }
  if (rlx_p.mask == 2u) { lo = min(clamp(pos - i32(rlx_p.window) + 1i, 0i, kv), hi); }
  if (rlx_p.mask == 5u) { hi = clamp(pos_at(b * rlx_p.mask_b + i) + 1i, 0i, kv); }
  return vec2<i32>(lo, hi);
}
// Max / sum of v over the TC invocations of this invocation's row (TC a power of two): each
// invocation combines its row's TC values itself, in the same order (2 barriers, where a tree
// took 2 + log2(TC)). NaN never raises the max (as on the CPU).
fn row_max(t: u32, lane: u32, v: f32) -> f32 {
  red[t] = v;
  workgroupBarrier();
  let first = t - lane;
  var r = red[first];
  for (var j = 1u; j < c_tc(); j++) {
    let o = red[first + j];
    r = select(r, o, o > r);
  }
  workgroupBarrier();
  return r;
}
fn row_sum(t: u32, lane: u32, v: f32) -> f32 {
  red[t] = v;
  workgroupBarrier();
  let first = t - lane;
  var r = red[first];
  for (var j = 1u; j < c_tc(); j++) { r = r + red[first + j]; }
  workgroupBarrier();
  return r;
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let neg_inf = bitcast<f32>(rlx_p.neg_inf);
  let D = c_d();
  let BR = c_br();
  let BC = c_bc();
  let TC = c_tc();
  let QS = 0u;  // the tiles' places in the pool (tile_words)
  let KP = D + 1u;  // K rows padded by a word: the scores' invocations read K across the banks
  let KS = BR * D;
  let KEND = KS + BC * KP;
  let VS = select(KEND, KS, c_alias() != 0u);
  let SS = select(VS + BC * D, KEND, c_alias() != 0u);
  let heads = rlx_p.heads;
  let group = rlx_p.group;
  let kv_heads = heads / group;
  let q_len = rlx_p.q_len;
  let nrows = q_len * group;  // a KV head's rows: R = i * group + (h - kvh * group)
  let nblk = rlx_p.nblk;
  let splits = rlx_p.splits;
  let units = rlx_p.batch * kv_heads * nblk * splits;
  let r3 = t / TC;    // this invocation's row in the softmax steps
  let lane = t % TC;  // and its place among the row's invocations
  for (var u = wid.x; u < units; u += nwg.x) {
    let split = u % splits;
    let blk = (u / splits) % nblk;
    let bkv = u / (splits * nblk);
    let kvh = bkv % kv_heads;
    let b = bkv / kv_heads;
    let R0 = blk * BR;
    let R1 = min(R0 + BR, nrows);
    let first = row_keys(b, R0 / group);
    let last = row_keys(b, (R1 - 1u) / group);
    var lo = min(first.x, last.x);
    var hi = max(first.y, last.y);
    if (rlx_p.mask == 5u) {  // positions in any order: the block's keys end after its largest
      for (var i = R0 / group + 1u; i < (R1 - 1u) / group; i++) { hi = max(hi, row_keys(b, i).y); }
    }
    if (splits > 1u) {
      lo = max(lo, i32(split * rlx_p.split_len));
      hi = min(hi, i32(min(rlx_p.kv_len, (split + 1u) * rlx_p.split_len)));
    }

    for (var x = t; x < BR * D; x += WG) {
      let R = R0 + x / D;
      var q = 0.0f;
      if (R < nrows) {
        let h = kvh * group + R % group;
        q = ld_q(b * rlx_p.qsb + (R / group) * rlx_p.qss + h * rlx_p.qsh + x % D);
      }
      pool[QS + x] = q;
    }
    var acc: array<f32, MAX_ACC>;
    var m = neg_inf;  // row r3's running max and sum (the same in each of its TC invocations)
    var l = 0.0f;
    let kb = b * rlx_p.ksb + kvh * rlx_p.ksh;
    let vb = b * rlx_p.vsb + kvh * rlx_p.vsh;
    for (var j0 = lo; j0 < hi; j0 += i32(BC)) {
      workgroupBarrier();  // the Q tile is written; the previous tile is no longer read
      for (var x = t; x < BC * D; x += WG) {
        let j = j0 + i32(x / D);
        var kx = 0.0f;
        var vx = 0.0f;
        if (j < hi) {
          kx = ld_k(kb + u32(j) * rlx_p.kss + x % D);
          if (c_alias() == 0u) { vx = ld_v(vb + u32(j) * rlx_p.vss + x % D); }
        }
        pool[KS + (x / D) * KP + x % D] = kx;
        if (c_alias() == 0u) { pool[VS + x] = vx; }
      }
      workgroupBarrier();
      // The BR x BC scores.
      for (var x = t; x < BR * BC; x += WG) {
        let r = x / BC;
        let c = x % BC;
        let R = R0 + r;
        let i = R / group;
        let h = kvh * group + R % group;
        let j = j0 + i32(c);
        var s = neg_inf;
        if (R < nrows && j < hi) {
          let rk = row_keys(b, i);
          if (j >= rk.x && j < rk.y && (rlx_p.mask != 3u || keep_at(b * rlx_p.mask_b + u32(j)))) {
            var dot = 0.0f;
            let qr = QS + r * D;
            let kr = KS + c * KP;
            for (var d = 0u; d < D; d++) { dot = fma(pool[qr + d], pool[kr + d], dot); }
            s = dot * rlx_p.scale;
            if (rlx_p.softcap > 0.0f) { s = rlx_p.softcap * attn_tanh(s / rlx_p.softcap); }
            if (rlx_p.mask == 4u) { s += bias_at(b * rlx_p.bs0 + h * rlx_p.bs1 + i * rlx_p.bs2 + u32(j) * rlx_p.bs3); }
          }
        }
        pool[SS + x] = s;
      }
      workgroupBarrier();
      // Online softmax of row r3 over its TC invocations.
      var tmax = neg_inf;
      for (var c = lane; c < BC; c += TC) {
        let s = pool[SS + r3 * BC + c];
        if (s > tmax) { tmax = s; }  // NaN scores do not raise the max (as on the CPU)
      }
      tmax = row_max(t, lane, tmax);
      let mnew = select(m, tmax, tmax > m);
      var alpha = 1.0f;
      if (!(mnew == m)) {
        if (is_ninf(m)) { alpha = 0.0f; } else { alpha = exp(m - mnew); }
      }
      var psum = 0.0f;
      for (var c = lane; c < BC; c += TC) {
        let s = pool[SS + r3 * BC + c];
        var p = 0.0f;
        if (!is_ninf(s)) { p = exp(s - mnew); }
        psum += p;
        pool[SS + r3 * BC + c] = p;
      }
      psum = row_sum(t, lane, psum);
      l = l * alpha + psum;
      m = mnew;
      if (lane == 0u) { alpha_s[r3] = alpha; }
      if (c_alias() != 0u) {
        workgroupBarrier();  // the K tile is no longer read
        for (var x = t; x < BC * D; x += WG) {
          let j = j0 + i32(x / D);
          var vx = 0.0f;
          if (j < hi) { vx = ld_v(vb + u32(j) * rlx_p.vss + x % D); }
          pool[VS + x] = vx;
        }
      }
      workgroupBarrier();  // P, alpha (and V) are in workgroup memory
      // O = O * alpha + P V over this invocation's accumulators.
      for (var k = 0u; k < c_nacc(); k++) {
        let e = t + WG * k;
        if (e < BR * D) {
          let r = e / D;
          let d = e % D;
          var a = acc[k] * alpha_s[r];
          let pr = SS + r * BC;
          for (var c = 0u; c < BC; c++) { a = fma(pool[pr + c], pool[VS + c * D + d], a); }
          acc[k] = a;
        }
      }
    }
    if (lane == 0u) {
      m_s[r3] = m;
      l_s[r3] = l;
    }
    workgroupBarrier();
    for (var k = 0u; k < c_nacc(); k++) {
      let e = t + WG * k;
      let r = e / D;
      let R = R0 + r;
      if (e < BR * D && R < nrows) {
        let d = e % D;
        let i = R / group;
        let h = kvh * group + R % group;
        if (splits > 1u) {
          let base = ((split * rlx_p.batch * heads + b * heads + h) * q_len + i) * (D + 2u);
          st_part(base + d, acc[k]);
          if (d == 0u) {
            st_part(base + D, m_s[r]);
            st_part(base + D + 1u, l_s[r]);
          }
        } else {
          var o = 0.0f;
          if (!is_ninf(m_s[r])) { o = acc[k] / l_s[r]; }
          st_o(b * rlx_p.osb + i * rlx_p.oss + h * rlx_p.osh + d, o);
        }
      }
    }
    workgroupBarrier();  // m_s / l_s and the Q tile are free for the next unit
  }
}
)";

// Merges the splits' partial rows: one workgroup per output row (grid-stride), invocations over D.
const char* kCombine = R"(
fn is_ninf(x: f32) -> bool { return bitcast<u32>(x) == 0xff800000u; }
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let rows = rlx_p.batch * rlx_p.heads * rlx_p.q_len;
  let D = rlx_p.head_dim;
  let stride = rows * (D + 2u);  // between splits
  for (var row = wid.x; row < rows; row += nwg.x) {
    let i = row % rlx_p.q_len;
    let bh = row / rlx_p.q_len;
    let h = bh % rlx_p.heads;
    let b = bh / rlx_p.heads;
    var m = bitcast<f32>(rlx_p.neg_inf);
    for (var s = 0u; s < rlx_p.splits; s++) {
      let ms = ld_p(s * stride + row * (D + 2u) + D);
      if (ms > m) { m = ms; }
    }
    var l = 0.0f;
    for (var s = 0u; s < rlx_p.splits; s++) {
      let base = s * stride + row * (D + 2u);
      let ms = ld_p(base + D);
      if (!is_ninf(ms)) { l += ld_p(base + D + 1u) * exp(ms - m); }
    }
    for (var d = t; d < D; d += 64u) {
      var a = 0.0f;
      for (var s = 0u; s < rlx_p.splits; s++) {
        let base = s * stride + row * (D + 2u);
        let ms = ld_p(base + D);
        if (!is_ninf(ms)) { a += ld_p(base + d) * exp(ms - m); }
      }
      var o = 0.0f;
      if (!is_ninf(m)) { o = a / l; }
      st_o(b * rlx_p.osb + i * rlx_p.oss + h * rlx_p.osh + d, o);
    }
  }
}
)";

std::string load_fn(const std::string& name, const Binds& b, size_t k) {
  return "fn " + name + "(e: u32) -> f32 { return bitcast<f32>(" + b.at(k, "e") + "); }\n";
}
std::string store_fn(const std::string& name, const Binds& b, size_t k, DType t) {
  return "fn " + name + "(e: u32, v: f32) { " + b.at(k, "e") + " = bitcast<u32>(" +
         codegen::wgsl_language().round(t, "v") + "); }\n";
}

bool kind(std::string_view name) { return name == "attention"; }

bool node(const Graph& g, const Node& n, const DeviceInfo* info, std::string* why) {
  const auto* a = std::get_if<ops::Attention>(&n.op);
  if (!a) return refuse(why, "the WebGPU attention family runs only 'attention'");
  for (size_t i = 0; i < 3; ++i) {
    const DType t = g.shape(n.inputs.at(i)).dtype;
    if (!wgsl_float(t))
      return refuse(why, std::string("the WebGPU attention kernel takes q, k, v in f32, f16 or bf16, not ") + dtype_name(t));
  }
  if (a->mask_kind == MaskKind::Bias && n.inputs.size() > 3 && !wgsl_float(g.shape(n.inputs[3]).dtype))
    return refuse(why, std::string("the WebGPU attention kernel takes a float additive bias, not ") +
                           dtype_name(g.shape(n.inputs[3]).dtype));
  const uint64_t limit = info ? info->limits.max_compute_workgroup_storage_size : 16384;
  if (!pick_tiles(a->head_dim, 1, limit))
    return refuse(why, "head_dim " + std::to_string(a->head_dim) + " needs more workgroup memory than the device's " +
                           std::to_string(limit) + " bytes");
  return true;
}

}  // namespace

const FamilyClaims kAttentionClaims{kind, node};

void lower_attention(LowerContext& cx, const plan::Step& st) {
  const auto& g = std::get<plan::AttentionGeom>(st.geom);
  const DType t = st.out.at(0).dtype;
  for (size_t i = 0; i < 3; ++i)
    if (!wgsl_float(st.in.at(i).dtype))
      throw Error(step_label(st) + ": the WebGPU attention kernel takes f32, f16 or bf16, not " +
                  dtype_name(st.in.at(i).dtype));
  if (g.batch == 0 || g.q_len == 0 || g.num_heads == 0 || g.head_dim == 0) return;
  const bool positions = g.mask == MaskKind::Positions;
  const bool has_mask = g.mask == MaskKind::Custom || g.mask == MaskKind::Bias || positions;
  plan::check_attention_operands(st, "WebGPU");
  const uint64_t limit = cx.info().limits.max_compute_workgroup_storage_size;
  const int64_t rows = g.q_len * g.group;  // query rows per KV head (the heads of a group share K/V tiles)
  check_index(st, "query rows x group", rows);
  const std::optional<Tiles> tiles = pick_tiles(g.head_dim, rows, limit, g.q_len == 1);
  if (!tiles)
    throw Error(step_label(st) + ": head_dim " + std::to_string(g.head_dim) +
                " needs more workgroup memory than the device's " + std::to_string(limit) + " bytes");
  const int64_t nblk = (rows + tiles->br - 1) / tiles->br;
  const int64_t units = g.batch * g.num_kv_heads * nblk;
  check_index(st, "batch x kv heads x row blocks", units);

  // Keys split over workgroups when the units alone are few (decode over a long KV cache).
  int64_t splits = 1, split_len = std::max<int64_t>(g.kv_len, 1);
  if (units < kTargetGroups && g.kv_len >= 2 * kMinSplitKeys) {
    splits = std::min({(kTargetGroups + units - 1) / units, g.kv_len / std::max<int64_t>(tiles->bc, 32), kMaxSplits});
    split_len = (g.kv_len + splits - 1) / splits;
    split_len = (split_len + tiles->bc - 1) / tiles->bc * tiles->bc;
    splits = (g.kv_len + split_len - 1) / split_len;
  }
  const bool split = splits > 1;
  const int64_t part_elems = splits * g.batch * g.num_heads * g.q_len * (g.head_dim + 2);
  if (split) check_index(st, "split partials", part_elems);

  const Operand q = cx.in(st.in[0]), k = cx.in(st.in[1]), v = cx.in(st.in[2]), out = cx.out(st.out.at(0));
  const Operand part = split ? cx.scratch(static_cast<size_t>(part_elems) * 4, step_label(st) + " split partials")
                             : Operand{};
  std::vector<Operand> ops{split ? part : out, q, k, v};
  if (has_mask) ops.push_back(cx.in(st.in[3]));
  const Binds b = plan_binds(ops, false);

  std::vector<std::string> names;
  for (const char* p : {"q", "k", "v", "o"})
    for (const char* x : {"sb", "ss", "sh"}) names.push_back(std::string(p) + x + ": u32");
  for (const char* p : {"batch", "heads", "q_len", "kv_len", "group", "head_dim", "br", "bc", "tc", "nacc", "kv_alias",
                        "nblk", "splits", "split_len", "mask", "window", "mask_b", "bs0", "bs1", "bs2", "bs3", "neg_inf"})
    names.push_back(std::string(p) + ": u32");
  names.push_back("scale: f32");
  names.push_back("softcap: f32");
  std::vector<uint32_t> params;
  for (const plan::AttnStrides* s : {&g.q, &g.k, &g.v, &g.out}) {
    params.push_back(u32(s->batch));
    params.push_back(u32(s->seq));
    params.push_back(u32(s->head));
  }
  const int64_t nacc = (tiles->br * g.head_dim + kWg - 1) / kWg;
  params.insert(params.end(), {u32(g.batch), u32(g.num_heads), u32(g.q_len), u32(g.kv_len), u32(g.group),
                               u32(g.head_dim), u32(tiles->br), u32(tiles->bc), u32(kWg / tiles->br), u32(nacc),
                               tiles->alias ? 1u : 0u, u32(nblk), u32(splits), u32(split_len),
                               static_cast<uint32_t>(g.mask), u32(g.window), u32(g.mask_batch_stride)});
  for (int i = 0; i < 4; ++i) params.push_back(g.mask == MaskKind::Bias ? u32(g.bias_strides[i]) : 0u);
  params.push_back(0xff800000u);
  params.push_back(f32_bits(g.scale));
  params.push_back(f32_bits(g.softcap));

  // One source per (dtype, mask binding): every size and attribute is a uniform parameter.
  std::string src = b.decls(names);
  src += "const WG: u32 = " + std::to_string(kWg) + "u;\nconst MAX_BR: u32 = " + std::to_string(kMaxRows) +
         "u;\nconst MAX_ACC: u32 = " + std::to_string(kMaxAcc) + "u;\nconst POOL_WORDS: u32 = " +
         std::to_string(pool_words(limit)) + "u;\n";
  codegen::Helpers h;
  codegen::wgsl_language().dtype_helpers(t, h);
  src += h.source();
  src += load_fn("ld_q", b, 1) + load_fn("ld_k", b, 2) + load_fn("ld_v", b, 3);
  // st_o: a result rounded to the output's dtype; st_part: a split's partial (f32).
  src += store_fn("st_o", b, 0, t) + "fn st_part(e: u32, v: f32) { " + b.at(0, "e") + " = bitcast<u32>(v); }\n";
  if (g.mask == MaskKind::Custom) {
    const DType mt = st.in[3].dtype;
    // Nonzero keeps; a float zero of either sign drops, NaN keeps (as the CPU's keep_flags).
    const std::string w = b.at(4, "e");
    src += "fn keep_at(e: u32) -> bool { return " + (is_float(mt) ? "(" + w + " & 0x7fffffffu) != 0u" : w + " != 0u") +
           "; }\n";
  } else {
    src += "fn keep_at(e: u32) -> bool { return true; }\n";
  }
  if (g.mask == MaskKind::Bias) src += load_fn("bias_at", b, 4);
  else src += "fn bias_at(e: u32) -> f32 { return 0.0f; }\n";
  // Positions: i32 words (i64 values are held in i32 words on WebGPU).
  src += positions ? "fn pos_at(e: u32) -> i32 { return bitcast<i32>(" + b.at(4, "e") + "); }\n"
                   : "fn pos_at(e: u32) -> i32 { return 0i; }\n";
  const std::optional<int64_t> bake = cx.knobs().webgpu_attn_baked();
  const bool baked = bake ? *bake != 0 : cx.info().adapter_type != "CPU";
  auto cfg = [&](const char* fn, const char* field, int64_t v) {
    src += std::string("fn ") + fn + "() -> u32 { return " + (baked ? std::to_string(v) + "u" : std::string("rlx_p.") + field) +
           "; }\n";
  };
  cfg("c_d", "head_dim", g.head_dim);
  cfg("c_br", "br", tiles->br);
  cfg("c_bc", "bc", tiles->bc);
  cfg("c_tc", "tc", kWg / tiles->br);
  cfg("c_nacc", "nacc", nacc);
  cfg("c_alias", "kv_alias", tiles->alias ? 1 : 0);
  src += kFlash;
  const auto groups = [&](int64_t n) {
    return static_cast<uint32_t>(std::clamp<int64_t>(
        n, 1, std::min<int64_t>({cx.info().limits.max_compute_workgroups_per_dimension, kMaxGroups1d, kMaxGroups})));
  };
  cx.dispatch(Kernel{"attention", src}, ops, params,
              false, groups(units * splits));
  if (!split) return;

  Operand part_in = part;
  part_in.write = false;
  const std::vector<Operand> cops{out, part_in};
  const Binds cb = plan_binds(cops, false);
  std::string csrc = cb.decls({"osb: u32", "oss: u32", "osh: u32", "batch: u32", "heads: u32", "q_len: u32",
                               "head_dim: u32", "splits: u32", "neg_inf: u32"});
  csrc += h.source() + store_fn("st_o", cb, 0, t) + load_fn("ld_p", cb, 1) + kCombine;
  cx.dispatch(Kernel{"attention_combine", csrc}, cops,
              {u32(g.out.batch), u32(g.out.seq), u32(g.out.head), u32(g.batch), u32(g.num_heads), u32(g.q_len),
               u32(g.head_dim), u32(splits), 0xff800000u},
              false, groups(g.batch * g.num_heads * g.q_len));
}

}  // namespace rlx::webgpu
