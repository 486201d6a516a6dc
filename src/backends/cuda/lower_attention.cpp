// Attention: the flash-style kernel of kernels/attention.h, with the KV range split across
// blocks (and a combine kernel) when the query rows alone cannot fill the GPU (decode).
#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <optional>

#include "backends/cuda/cuda_types.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/attention_decode_tc.h"
#include "backends/cuda/kernels/attention_mma.h"
#include "backends/cuda/kernels/mma.h"
#include "backends/cuda/launch.h"
#include "backends/cuda/lower.h"
#include "backends/cuda/lower_attention_mma.h"
#include "backends/cuda/status.h"
#include "rlx/error.h"

namespace rlx::cuda {
namespace {

constexpr int64_t kKT = 32;  // must match KT of the kernel source

// Query rows per warp of the CUDA-core kernel (RPW; a block has 4 warps): as many as the
// registers allow (16 accumulators of head_dim / 32 per row), so that a block re-reads the keys
// for as many rows as it can, while the grid still fills two waves of `sms` multiprocessors
// (else fewer, down to 4). Measured on the H100 (docs/benchmarks.md, session 19): BERT-base b32
// fp32 19.84 ms with 16 rows per warp against 20.10 with 4; b1 fp32 (24 blocks at 16 rows)
// 1.84 against 1.46 ms.
int64_t attention_rows_per_warp(int64_t head_dim, int64_t q_len, int64_t heads_x_batch, int64_t sms) {
  int64_t rpw = head_dim <= 64 ? 16 : head_dim <= 128 ? 8 : 4;
  while (rpw > 4 && (q_len + 4 * rpw - 1) / (4 * rpw) * heads_x_batch < 2 * sms) rpw /= 2;
  return rpw;
}
std::atomic<uint64_t> g_concat_reads{0}, g_rope_reads{0}, g_cluster_merges{0}, g_kv_smem{0}, g_tc_decodes{0};

struct AttnArgs {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  const void* mask;
  float* part;
  int64_t qs_b, qs_s, qs_h, ks_b, ks_s, ks_h, vs_b, vs_s, vs_h, os_b, os_s, os_h;
  int64_t batch, q_len, kv_len, heads, group;
  float scale, softcap;
  int32_t mask_kind;
  int64_t window, mask_batch;
  int64_t bias_s[4];
  int64_t split_len;
  const void* k2 = nullptr;
  const void* v2 = nullptr;
  int64_t k2s_b = 0, k2s_s = 0, k2s_h = 0, v2s_b = 0, v2s_s = 0, v2s_h = 0;
  int64_t k_split = INT64_MAX, v_split = INT64_MAX;  // no second part
  unsigned* tickets = nullptr;
  const void* rope_cos = nullptr;
  const void* rope_sin = nullptr;
  int64_t rope_rot = 0;
  int32_t rope_per_batch = 0, rope_neox = 0;
};

// A KV operand read in place from two parts (what an absorbed concat would have joined): rows
// [0, split) of `first`, the rest of `second`, each with its own (batch, seq, head) strides.
struct SplitKv {
  const void* first = nullptr;
  const void* second = nullptr;
  plan::AttnStrides first_strides, second_strides;
  int64_t split = 0;
  bool first_static = false;  // the first part is a leaf (a param: no kernel writes it)
};

// The seq axis of a rank-4 attention operand in this layout.
int64_t seq_axis(AttnLayout layout) { return layout == AttnLayout::BSHD ? 1 : 2; }

// The concat `c` (two dense parts along the seq axis) as a SplitKv.
SplitKv split_kv(LowerContext& cx, const plan::Step& c, AttnLayout layout) {
  SplitKv s;
  s.first = cx.ptr(c.in.at(0));
  s.second = cx.ptr(c.in.at(1));
  // Both parts are dense [b, s, h, d] (BSHD) or [b, h, s, d] (BHSD); dims[3] is the head_dim.
  const size_t sa = static_cast<size_t>(seq_axis(layout)), ha = 3 - sa;
  const std::vector<int64_t>& d0 = c.in[0].dims;
  const std::vector<int64_t>& d1 = c.in[1].dims;
  s.first_strides = plan::attn_strides(layout, d0[sa], d0[ha], d0[3]);
  s.second_strides = plan::attn_strides(layout, d1[sa], d1[ha], d1[3]);
  s.split = d0[sa];
  s.first_static = c.in[0].loc.kind == plan::Location::Kind::Leaf;
  return s;
}

// The attention kernel `fn` over `grid` (blocks of `threads`), then, when the keys are split, the
// combine kernel of the same source merging the splits' partials (allocated here). With
// `tickets` (attn_decode) the kernel merges them itself: its last block per (batch, kv head),
// counted on zeroed tickets allocated here, one per grid.y * grid.z; with `cluster` (attn_decode
// compiled with CL = grid.x) the splits form one thread-block cluster and merge through its
// shared memory. `loads_before_wait`: the kernel loads (KV-cache) data before its
// programmatic-launch wait.
void add_attention_launches(LowerContext& cx, const std::string& what, CUfunction fn, const std::string& src,
                            AttnArgs a, const plan::AttentionGeom& g, int64_t splits,
                            const std::array<unsigned, 3>& grid, size_t smem, bool tickets = false,
                            bool loads_before_wait = false, bool cluster = false, unsigned threads = 128) {
  if (splits > 1 && !cluster) {
    const size_t part_bytes = static_cast<size_t>(splits * g.batch * g.num_heads * g.q_len * (g.head_dim + 2)) * 4;
    a.part = reinterpret_cast<float*>(cx.scratch(part_bytes, what + " split partials"));
    if (tickets) {
      const size_t n = static_cast<size_t>(grid[1]) * grid[2] * sizeof(unsigned);
      a.tickets = reinterpret_cast<unsigned*>(cx.zeroed_scratch(n, what + " split tickets"));
    }
  }
  auto main = std::make_shared<KernelLaunch>(what, fn, grid[0], threads, static_cast<unsigned>(smem), grid[1], grid[2]);
  if (loads_before_wait) main->pdl_prefetch();
  else main->pdl();
  if (cluster) main->cluster(grid[0]);
  main->arg(a);
  cx.add([main](cudaStream_t s) { main->launch(s); });
  if (splits <= 1 || tickets || cluster) return;
  const int64_t rows = g.batch * g.num_heads * g.q_len;
  auto comb = std::make_shared<KernelLaunch>(what + " combine", get_kernel("attn_combine", src),
                                             grid_for(rows * 32, 256), 256);
  comb->pdl();
  comb->arg(a).arg(static_cast<int32_t>(splits));
  cx.add([comb](cudaStream_t s) { comb->launch(s); });
}

// The tensor-core decode kernel's shape (kernels/attention_decode_tc.h): warps per block
// (RLX_CUDA_ATTN_DECODE_TC_WARPS, default 8) and keys per warp chunk (RLX_CUDA_ATTN_DECODE_TC_KEYS,
// default 64 up to head_dim 64, else 32: a larger chunk's accumulators no longer fit in registers;
// 0 here until the head_dim is known, see decode_tc_keys). Measured on the H100, Llama decode bf16 (docs/benchmarks.md,
// session 12): 8 x 64 0.674-0.675 ms, 8 x 32 0.674-0.676, 16 x 32 0.679-0.687, 16 x 16
// 0.677-0.682, 4 x 64 0.683-0.690.
struct DecodeTcShape {
  int64_t warps = 8, keys = 0;
};

// Every knob of the two decode kernels, read once per decode step, whichever kernel then runs (a
// bad value is an error, not ignored because the other kernel took the step).
struct DecodeKnobs {
  int64_t min_keys = 64;  // RLX_CUDA_ATTN_DECODE_KEYS: attn_decode's least keys per split
  int64_t cluster = 16;   // RLX_CUDA_ATTN_CLUSTER: attn_decode's largest cluster (0 or 1: none)
  bool smkv = true;       // RLX_CUDA_ATTN_SMKV: attn_decode copies leaf caches into shared memory
  bool tc = true;         // RLX_CUDA_ATTN_DECODE_TC: the tensor-core kernel where it fits
  bool early = true;      // RLX_CUDA_ATTN_DECODE_EARLY: it launches before the QKV product's wait
  DecodeTcShape tc_shape;
  std::string keys_origin;  // where the keys per chunk came from (for messages)
};
DecodeKnobs decode_knobs(const ResolvedKnobs& r) {
  DecodeKnobs k;
  k.min_keys = r.cuda_attn_decode_keys();
  k.cluster = r.cuda_attn_cluster();
  k.smkv = r.cuda_attn_smkv();
  k.tc = r.cuda_attn_decode_tc();
  k.early = r.cuda_attn_decode_early();
  k.tc_shape.warps = r.cuda_attn_decode_tc_warps();
  k.tc_shape.keys = r.cuda_attn_decode_tc_keys().value_or(0);
  k.keys_origin = r.origin("cuda_attn_decode_tc_keys");
  const int64_t w = k.tc_shape.warps, n = k.tc_shape.keys;
  if ((w & (w - 1)) != 0 || (n & (n - 1)) != 0)
    throw Error(r.origin("cuda_attn_decode_tc_warps") + " and " + k.keys_origin +
                " must be powers of two (warps 1-16, keys 16-64), got " + std::to_string(w) + " and " +
                std::to_string(n));
  return k;
}

// How attn_decode splits the keys of a (batch, kv head): `splits` blocks of `split_len` keys, merged
// in one cluster or through a ticket; whether the cached rows go through shared memory; the
// kernel's dynamic shared memory.
struct DecodeSplits {
  int64_t splits = 1, split_len = 0;
  bool cluster = false, smkv = false;
  size_t smem = 0;
};

// At most about two blocks per multiprocessor, each with at least RLX_CUDA_ATTN_DECODE_KEYS keys
// (default 64: with a block's fixed cost after the wait now short, fewer and longer splits merge
// faster; measured on the H100, Llama decode bf16 0.738-0.745 ms with 64 against 0.772-0.779
// with 32, 0.790 with 128), at most 64 splits or `cluster_max` when it allows clusters (>= 2).
// `smem`: the kernel's shared memory without the cluster merge's inbox and the cached rows
// (`row_bytes` each, copied when both caches are leaves and they take at most 48 KiB).
DecodeSplits decode_splits(const plan::AttentionGeom& g, int64_t row_bytes, bool caches_static,
                           size_t smem, int64_t cluster_max, const DecodeKnobs& k) {
  DecodeSplits d;
  const int64_t rows = g.q_len * g.group, blocks = g.batch * (g.num_heads / g.group);
  const int64_t target = 2 * static_cast<int64_t>(device().sm_count);
  d.splits = std::clamp<int64_t>((target + blocks - 1) / blocks, 1, std::max<int64_t>(1, g.kv_len / k.min_keys));
  d.splits = std::min<int64_t>(d.splits, cluster_max >= 2 ? cluster_max : 64);
  d.split_len = (g.kv_len + d.splits - 1) / d.splits;
  d.splits = std::max<int64_t>(1, (g.kv_len + d.split_len - 1) / d.split_len);
  d.cluster = cluster_max >= 2 && d.splits >= 2;
  // With a cluster each block receives every split's partial of the result elements it merges
  // and every split's row max and sum.
  const int64_t per_block = (rows * g.head_dim + d.splits - 1) / d.splits;
  d.smem = smem + (d.cluster ? static_cast<size_t>(d.splits * (per_block + 2 * rows)) * 4 : 0);
  const size_t kv_bytes = static_cast<size_t>(d.split_len * (2 * row_bytes + 16));  // K rows padded by 16 bytes
  d.smkv = caches_static && kv_bytes <= 48 * 1024 && k.smkv;
  if (d.smkv) d.smem += kv_bytes;
  return d;
}

// The tensor-core kernel's shape at `head_dim` (a head_dim it takes): the knobs' keys per chunk,
// or the default for the head_dim.
DecodeTcShape decode_tc_shape(const DecodeKnobs& k, int64_t head_dim) {
  DecodeTcShape s = k.tc_shape;
  if (s.keys == 0) s.keys = head_dim <= 64 ? 64 : 32;
  if (s.keys > 32 && head_dim > 64)
    throw Error(k.keys_origin + "=" + std::to_string(s.keys) + " does not fit in registers at head_dim " +
                std::to_string(head_dim) + "; use 16 or 32 (or unset it)");
  return s;
}
// Its shared memory for `rows` query rows per KV head: K and V rows up to kv_len rounded up to the
// chunk, the 16-row Q tile, the warps' merge.
size_t decode_tc_smem(const plan::AttentionGeom& g, int64_t rows, const DecodeTcShape& s) {
  const int64_t cap = (g.kv_len + s.keys - 1) / s.keys * s.keys;
  return static_cast<size_t>((2 * cap + 16) * (g.head_dim + 8)) * 2 +
         static_cast<size_t>(s.warps * rows * (g.head_dim + 2)) * 4;
}

// Whether the tensor-core decode kernel takes the step: f16/bf16, a head_dim the m16n8k16 tiles
// take (a multiple of 16, at most 128: the accumulators stay in registers), at most 16 rows per
// KV head (one m16 tile) and a (kv head, batch)'s whole K/V range in one block's shared memory
// (so no split merge). RLX_CUDA_ATTN_DECODE_TC=0 turns it off.
bool decode_tc_fits(const plan::AttentionGeom& g, DType t, int64_t rows, const DecodeKnobs& k) {
  if (!k.tc || (t != DType::F16 && t != DType::BF16)) return false;
  if (g.head_dim % 16 != 0 || g.head_dim > 128 || rows > 16 || device().cc_major < 8) return false;
  return decode_tc_smem(g, rows, decode_tc_shape(k, g.head_dim)) <= device().smem_per_block_optin;
}

// The tensor-core decode launch: one block per (kv head, batch). `a` is complete (RoPEs and KV
// parts resolved, 16-byte alignment checked by try_decode); `tc`: the RoPE tables' type,
// `rope_static`: they are leaves (read before the wait).
void add_decode_tc(LowerContext& cx, const plan::Step& st, const plan::AttentionGeom& g, AttnArgs a, DType t,
                   DType mt, DType tc, bool rope_q, bool rope_k, bool rope_static, int64_t new_k, bool k_static,
                   bool v_static, const DecodeKnobs& k) {
  const int64_t rows = g.q_len * g.group;
  const DecodeTcShape shape = decode_tc_shape(k, g.head_dim);
  const size_t smem = decode_tc_smem(g, rows, shape);
  auto def = [](const char* name, int64_t v) { return "#define " + std::string(name) + " " + std::to_string(v) + "\n"; };
  const std::string defs = def("BF16", t == DType::BF16) + def("HD", g.head_dim) + def("R", rows) +
                           def("NW", shape.warps) + def("BN", shape.keys) + def("MASK", attention_mask_code(g.mask)) +
                           def("SOFTCAP", g.softcap > 0) + def("K_STATIC", k_static) + def("V_STATIC", v_static) +
                           def("ROPE_Q", rope_q) + def("ROPE_K", rope_k) + def("NK", rope_k ? new_k : 0) +
                           def("ROPE_STATIC", rope_static) + ksrc::kTensorCoreHelpers + ksrc::kMma16816;
  const std::string body =
      std::string(ksrc::kAttentionCommon) + ksrc::kAttentionDecodeLoads + ksrc::kAttentionDecodeTc;
  const std::string src =
      kernel_source(body.c_str(), {{"T", storage_type(t)}, {"M", storage_type(mt)}, {"TC", storage_type(tc)}}, defs);
  const CUfunction fn = get_kernel("attn_decode_tc", src);
  allow_dynamic_smem(fn, smem);
  g_tc_decodes.fetch_add(1, std::memory_order_relaxed);
  // Right after a packed GEMV (the QKV product), that GEMV lets this kernel launch before its own
  // wait, so the cache copies before this kernel's wait overlap the whole product
  // (RLX_CUDA_ATTN_DECODE_EARLY=0: at the GEMV's wait, as every kernel).
  LowerContext::WeightStream& ws = cx.weight_stream();
  if (k.early && (k_static || v_static) && ws.launch_next_early && ws.ops_after_gemv == cx.op_count())
    ws.launch_next_early();
  add_attention_launches(cx, step_label(st) + " decode (tensor cores)", fn, src, a, g, 1,
                         {1u, static_cast<unsigned>(g.num_heads / g.group), static_cast<unsigned>(g.batch)}, smem,
                         false, k_static || v_static, false, static_cast<unsigned>(32 * shape.warps));
}

// Decode (few query rows per KV head): the tensor-core kernel (one block per (kv head, batch))
// where decode_tc_fits, else the attn_decode kernel of kernels/attention.h, one block per (key
// split, kv head, batch) for the whole head group. Returns false when neither takes the step
// (more than 16 rows per KV head, or more than 8 outside the tensor-core kernel; head rows not a
// power-of-two count of 16-byte pieces; unaligned strides).
bool try_decode(LowerContext& cx, const plan::Step& st, const plan::AttentionGeom& g, AttnArgs a, DType t, DType mt,
                const std::optional<SplitKv>& ks, const std::optional<SplitKv>& vs, const plan::Step* rope_q,
                const plan::Step* rope_k) {  // the absorbed RoPEs of q and of the new K rows, or null
  // The decode kernels read the positions before their programmatic-launch wait: only a leaf's
  // (uploaded before any kernel runs).
  if (g.mask == MaskKind::Positions && st.in.at(3).loc.kind != plan::Location::Kind::Leaf) return false;
  const int64_t es = static_cast<int64_t>(dtype_size(t)), ve = 16 / es;
  const int64_t rows = g.q_len * g.group;
  const int64_t row_bytes = g.head_dim * es;
  if (rows > 16 || row_bytes % 16 != 0) return false;
  if (ks) a.k = ks->first, a.k2 = ks->second, a.k_split = ks->split;
  if (vs) a.v = vs->first, a.v2 = vs->second, a.v_split = vs->split;
  if (rope_k && !ks) return false;
  const plan::AttnStrides k1 = ks ? ks->first_strides : g.k, v1 = vs ? vs->first_strides : g.v;
  const plan::AttnStrides k2 = ks ? ks->second_strides : g.k, v2 = vs ? vs->second_strides : g.v;
  a.ks_b = k1.batch, a.ks_s = k1.seq, a.ks_h = k1.head, a.vs_b = v1.batch, a.vs_s = v1.seq, a.vs_h = v1.head;
  a.k2s_b = k2.batch, a.k2s_s = k2.seq, a.k2s_h = k2.head, a.v2s_b = v2.batch, a.v2s_s = v2.seq, a.v2s_h = v2.head;
  for (const plan::AttnStrides* s : {&k1, &k2, &v1, &v2})
    if (s->batch % ve != 0 || s->seq % ve != 0 || s->head % ve != 0) return false;
  if (pointer_alignment(a.k) < 16 || pointer_alignment(a.v) < 16) return false;
  if ((ks && pointer_alignment(a.k2) < 16) || (vs && pointer_alignment(a.v2) < 16)) return false;
  const int64_t kv_heads = g.num_heads / g.group;
  if (g.batch > 65535 || kv_heads > 65535) return false;
  // New K / V rows (a cache concatenated with them, read in place) are staged in shared memory
  // when there are few (an absorbed RoPE of K always: they are rotated there).
  auto staged = [&](const std::optional<SplitKv>& part) {
    return part && g.kv_len - part->split <= 16 ? g.kv_len - part->split : int64_t{0};
  };
  const int64_t new_k = rope_k ? std::get<plan::RopeGeom>(rope_k->geom).seq : staged(ks);
  const int64_t new_v = staged(vs);
  if (rope_k && new_k != g.kv_len - ks->split) return false;
  // The rows of a leaf K/V part (a KV cache held in params) are copied into shared memory, or
  // prefetched into L2, before waiting for the previous kernel.
  const bool k_static = ks ? ks->first_static : st.in.at(1).loc.kind == plan::Location::Kind::Leaf;
  const bool v_static = vs ? vs->first_static : st.in.at(2).loc.kind == plan::Location::Kind::Leaf;
  const std::string what = step_label(st);
  const DecodeKnobs knobs = decode_knobs(cx.knobs());
  const bool tc = decode_tc_fits(g, t, rows, knobs);
  // attn_decode: at most 8 rows; a row is a power-of-two count of 16-byte pieces (which divides
  // its 128 threads); q rows, a chunk's scores, the key groups' partials and three per-row floats,
  // then the new K rows (padded by 16 bytes, as the cached ones) and V rows in 48 KiB.
  const int64_t ndc = row_bytes / 16, kg = 128 / std::max<int64_t>(1, ndc), chunk = ksrc::kDecodeChunkKeys;
  const size_t smem = static_cast<size_t>(rows * g.head_dim + rows * chunk + kg * rows * g.head_dim + 3 * rows) * 4 +
                      static_cast<size_t>(new_k * (row_bytes + 16) + new_v * row_bytes);
  DecodeSplits sp;
  if (!tc) {
    if (rows > kDecodeAttentionLimits.max_rows_per_kv_head || ndc > 128 || (ndc & (ndc - 1)) != 0 || smem > 48 * 1024)
      return false;
    // Thread-block clusters (sm_90+) of at most RLX_CUDA_ATTN_CLUSTER blocks (default 16, the
    // largest the H100 schedules; 0 or 1: off, the splits merge through global partials and a
    // ticket).
    const int64_t cluster_max = device().cc_major >= 9 && driver().launch_kernel_ex ? knobs.cluster : 0;
    sp = decode_splits(g, row_bytes, k_static && v_static, smem, cluster_max, knobs);
    // The in-kernel ticket merge of the splits reuses the shared memory: 2 * rows * splits + rows floats.
    if (!sp.cluster && static_cast<size_t>(2 * rows * sp.splits + rows) * 4 > smem)
      throw Error(what + ": internal: the decode merge of " + std::to_string(sp.splits) + " splits needs more shared memory");
  }
  // Absorbed RoPEs (plan_attention_ropes): their inputs are read and rotated on load, so one
  // that the memory plan placed under the result is rotated by its own step first, unless it is
  // q's exactly in the result's place (same bytes, same strides): a block writes only the rows
  // of its own head group, which it (and, with splits, every block of the group before the
  // merge) has read in its prologue.
  for (const plan::Step** r : {&rope_q, &rope_k}) {
    if (!*r || !plan::arena_overlap((*r)->in.at(0), st.out.at(0))) continue;
    const plan::TensorRef &in = (*r)->in.at(0), &out = st.out.at(0);
    const bool in_place = *r == rope_q && in.loc.offset == out.loc.offset && in.loc.bytes == out.loc.bytes &&
                          a.qs_b == a.os_b && a.qs_s == a.os_s && a.qs_h == a.os_h;
    if (!in_place) {
      lower_step(cx, **r);
      *r = nullptr;
    }
  }
  const plan::Step* rope = rope_q ? rope_q : rope_k;
  if (rope_q) a.q = cx.ptr(rope_q->in.at(0));
  if (rope_k) a.k2 = cx.ptr(rope_k->in.at(0));
  if (rope) {
    const auto& rg = std::get<plan::RopeGeom>(rope->geom);
    a.rope_cos = cx.ptr(rope->in.at(1)), a.rope_sin = cx.ptr(rope->in.at(2));
    a.rope_rot = rg.n_rot, a.rope_per_batch = rg.per_batch ? 1 : 0;
    a.rope_neox = std::get<ops::Rope>(rope->op).style == RopeStyle::NeoX ? 1 : 0;
    g_rope_reads.fetch_add((rope_q ? 1 : 0) + (rope_k ? 1 : 0), std::memory_order_relaxed);
  }
  const DType tc_type = rope ? rope->in.at(1).dtype : t;
  if (tc) {
    const bool rope_static = rope && rope->in.at(1).loc.kind == plan::Location::Kind::Leaf &&
                             rope->in.at(2).loc.kind == plan::Location::Kind::Leaf;
    add_decode_tc(cx, st, g, a, t, mt, tc_type, rope_q != nullptr, rope_k != nullptr, rope_static, new_k, k_static,
                  v_static, knobs);
    return true;
  }
  const std::string body = std::string(ksrc::kAttentionCommon) + ksrc::kAttentionDecodeLoads + ksrc::kAttentionDecode;
  auto compile = [&](const DecodeSplits& d) {
    auto def = [](const char* name, int64_t v) { return "#define " + std::string(name) + " " + std::to_string(v) + "\n"; };
    const std::string defs = def("HD", g.head_dim) + def("R", rows) + def("K_STATIC", k_static) +
                             def("V_STATIC", v_static) + def("ROPE_Q", rope_q != nullptr) +
                             def("ROPE_K", rope_k != nullptr) + def("NK", new_k) + def("NV", new_v) +
                             def("SMKV", d.smkv) + def("CL", d.cluster ? d.splits : 0) + def("KC", chunk) +
                             (g.mask == MaskKind::Positions ? "#define POS_MASK 1\n" : "");
    const std::string src =
        kernel_source(body.c_str(), {{"T", storage_type(t)}, {"M", storage_type(mt)}, {"TC", storage_type(tc_type)}}, defs);
    const CUfunction fn = get_kernel("attn_decode", src);
    allow_dynamic_smem(fn, d.smem);
    if (d.cluster && d.splits > 8)
      RLX_CU_CHECK(driver().func_set_attribute(fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
    return std::pair{fn, src};
  };
  auto [fn, src] = compile(sp);
  // A cluster above the portable 8 blocks is kept only where the driver says the device can place
  // it; otherwise the splits fall back to clusters of 8.
  auto fits = [&] {
    KernelLaunch probe(what, fn, static_cast<unsigned>(sp.splits), 128, static_cast<unsigned>(sp.smem),
                       static_cast<unsigned>(kv_heads), static_cast<unsigned>(g.batch));
    return probe.cluster(static_cast<unsigned>(sp.splits)).max_active_clusters() > 0;
  };
  if (sp.cluster && sp.splits > 8 && !fits()) {
    sp = decode_splits(g, row_bytes, k_static && v_static, smem, 8, knobs);
    std::tie(fn, src) = compile(sp);
  }
  a.split_len = sp.split_len;
  if (sp.cluster) g_cluster_merges.fetch_add(1, std::memory_order_relaxed);
  if (sp.smkv) g_kv_smem.fetch_add(1, std::memory_order_relaxed);
  add_attention_launches(cx, what + " decode", fn, src, a, g, sp.splits,
                         {static_cast<unsigned>(sp.splits), static_cast<unsigned>(kv_heads), static_cast<unsigned>(g.batch)},
                         sp.smem, true, k_static || v_static, sp.cluster);
  return true;
}

}  // namespace

void lower_attention(LowerContext& cx, const plan::Step& st) {
  const auto& g = std::get<plan::AttentionGeom>(st.geom);
  const std::string what = step_label(st);
  const plan::TensorRef& out = st.out.at(0);
  const DType t = out.dtype;
  if (g.head_dim % 4 != 0 || g.head_dim > 256 || g.head_dim <= 0)
    throw Error(what + ": CUDA attention needs head_dim a multiple of 4 and <= 256, got " + std::to_string(g.head_dim));
  if (out.numel() == 0) return;
  // Concats this step reads in place (plan_attention_concats, decode-shaped steps only): any path
  // but the decode kernel runs them first, as the schedule would have.
  // Likewise the RoPEs of q and of the new K rows (plan_attention_ropes).
  std::vector<const plan::Step*> concats, ropes;
  for (const plan::Step* p : cx.absorbed_producers(st))
    (std::holds_alternative<ops::Rope>(p->op) ? ropes : concats).push_back(p);
  if (concats.empty() && ropes.empty() && lower_attention_mma(cx, st)) return;  // f16/bf16 prefill on the tensor cores
  const bool has_mask = g.mask == MaskKind::Custom || g.mask == MaskKind::Bias || g.mask == MaskKind::Positions;
  const DType mt = has_mask ? st.in.at(3).dtype : t;

  AttnArgs a{};
  a.q = cx.ptr(st.in.at(0));
  a.k = cx.ptr(st.in.at(1));
  a.v = cx.ptr(st.in.at(2));
  a.out = cx.ptr(out);
  a.mask = has_mask ? cx.ptr(st.in.at(3)) : nullptr;
  a.qs_b = g.q.batch, a.qs_s = g.q.seq, a.qs_h = g.q.head;
  a.ks_b = g.k.batch, a.ks_s = g.k.seq, a.ks_h = g.k.head;
  a.vs_b = g.v.batch, a.vs_s = g.v.seq, a.vs_h = g.v.head;
  a.os_b = g.out.batch, a.os_s = g.out.seq, a.os_h = g.out.head;
  a.batch = g.batch, a.q_len = g.q_len, a.kv_len = g.kv_len, a.heads = g.num_heads, a.group = g.group;
  a.scale = static_cast<float>(g.scale);
  a.softcap = static_cast<float>(g.softcap);
  a.mask_kind = attention_mask_code(g.mask);
  a.window = g.window;
  a.mask_batch = g.mask_batch_stride;
  for (int i = 0; i < 4; ++i) a.bias_s[i] = g.bias_strides[i];

  std::optional<SplitKv> ks, vs;
  for (const plan::Step* c : concats) {
    if (c->out.at(0).value == st.in.at(1).value) ks = split_kv(cx, *c, g.layout);
    if (c->out.at(0).value == st.in.at(2).value) vs = split_kv(cx, *c, g.layout);
  }
  const plan::Step *rope_q = nullptr, *rope_k = nullptr;
  for (const plan::Step* r : ropes) (r->out.at(0).value == st.in.at(0).value ? rope_q : rope_k) = r;
  if (try_decode(cx, st, g, a, t, mt, ks, vs, rope_q, rope_k)) {
    g_concat_reads.fetch_add(concats.size(), std::memory_order_relaxed);
    return;
  }
  for (const plan::Step* r : ropes) lower_step(cx, *r);  // before the concat that reads the new K rows
  for (const plan::Step* c : concats) lower_step(cx, *c);

  // Split the keys when the (batch, head, query block) grid is smaller than two waves.
  const int64_t rpw = attention_rows_per_warp(g.head_dim, g.q_len, g.batch * g.num_heads, device().sm_count);
  const int64_t qb = 4 * rpw;
  const int64_t qblocks = (g.q_len + qb - 1) / qb;
  const int64_t blocks = qblocks * g.batch * g.num_heads;
  const int64_t target = 2 * static_cast<int64_t>(device().sm_count);
  int64_t splits = 1;
  if (blocks < target && g.kv_len > 4 * kKT)
    splits = std::min<int64_t>((target + blocks - 1) / blocks, (g.kv_len + 2 * kKT - 1) / (2 * kKT));
  splits = std::clamp<int64_t>(splits, 1, 64);
  int64_t split_len = (g.kv_len + splits - 1) / splits;
  split_len = std::max<int64_t>(kKT, (split_len + kKT - 1) / kKT * kKT);
  splits = std::max<int64_t>(1, (g.kv_len + split_len - 1) / split_len);
  a.split_len = split_len;

  const std::string body = std::string(ksrc::kAttentionCommon) + ksrc::kAttention + ksrc::kAttentionCombine;
  const std::string src = kernel_source(body.c_str(), {{"T", storage_type(t)}, {"M", storage_type(mt)}},
                                        "#define HD " + std::to_string(g.head_dim) + "\n#define RPW " +
                                            std::to_string(rpw) + "\n" +
                                            (g.mask == MaskKind::Positions ? "#define POS_MASK 1\n" : ""));
  const CUfunction fn = get_kernel("attention", src);
  // Q, K (rows padded by 4 floats), V, and each warp's probabilities of a tile.
  const size_t smem =
      static_cast<size_t>(qb * g.head_dim + kKT * (g.head_dim + 4) + kKT * g.head_dim + 4 * rpw * kKT) * 4;
  if (smem > device().smem_per_block_optin)
    throw Error(what + ": attention with head_dim " + std::to_string(g.head_dim) + " needs " + std::to_string(smem) +
                " bytes of shared memory, the device allows " + std::to_string(device().smem_per_block_optin));
  allow_dynamic_smem(fn, smem);
  if (g.batch * g.num_heads > 65535) throw Error(what + ": CUDA attention supports batch * heads <= 65535");
  add_attention_launches(cx, what, fn, src, a, g, splits,
                         {static_cast<unsigned>(qblocks), static_cast<unsigned>(g.batch * g.num_heads),
                          static_cast<unsigned>(splits)},
                         smem);
}

uint64_t attention_concat_reads() { return g_concat_reads.load(std::memory_order_relaxed); }
uint64_t attention_rope_reads() { return g_rope_reads.load(std::memory_order_relaxed); }
uint64_t attention_cluster_merges() { return g_cluster_merges.load(std::memory_order_relaxed); }
uint64_t attention_kv_smem_copies() { return g_kv_smem.load(std::memory_order_relaxed); }
uint64_t attention_tc_decodes() { return g_tc_decodes.load(std::memory_order_relaxed); }

}  // namespace rlx::cuda
