// Decode from the QKV product to the attention's result in one clustered kernel
// (kernels/attention_decode_qkv.h): planning which product a decode attention takes over, and
// its lowering (with a fallback to the separate launches wherever the kernel does not fit).
#include <algorithm>
#include <atomic>
#include <memory>
#include <set>
#include <string>

#include "backends/cuda/attn_args.h"
#include "backends/cuda/cuda_types.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/attention_decode_qkv.h"
#include "backends/cuda/kernels/attention_decode_tc.h"
#include "backends/cuda/kernels/attention_mma.h"
#include "backends/cuda/kernels/gemv_packed.h"
#include "backends/cuda/launch.h"
#include "backends/cuda/lower.h"
#include "backends/cuda/status.h"
#include "rlx/error.h"

namespace rlx::cuda {
namespace {

std::atomic<uint64_t> g_qkv_decodes{0};

Value root_of(const plan::TensorRef& r) { return r.loc.is_view ? r.loc.root : r.value; }

// The pieces of a decode attention step that the fused kernel reads: its K and V concats
// (cache, new row), the RoPEs of q and of the new K row (both or neither), and the tensors q,
// the new K row and the new V row are read from (before their RoPE).
struct QkvParts {
  const plan::Step *kcat = nullptr, *vcat = nullptr, *rope_q = nullptr, *rope_k = nullptr;
  const plan::TensorRef *q = nullptr, *k = nullptr, *v = nullptr;
};

// `absorbed`: the concat and rope steps the attention step `a` absorbs. Nullopt when the fused
// kernel cannot take the step's shape (batch 1, one query row, BSHD, f16/bf16, no mask tensor,
// head_dim 32/64/96/128, at most 16 query heads per KV head, one new K and V row after a leaf
// cache each, the RoPEs of q and k both absorbed or neither present).
std::optional<QkvParts> qkv_parts(const plan::Step& a, const std::vector<const plan::Step*>& absorbed) {
  const auto& g = std::get<plan::AttentionGeom>(a.geom);
  const DType t = a.out.at(0).dtype;
  if (g.batch != 1 || g.q_len != 1 || g.layout != AttnLayout::BSHD || (t != DType::F16 && t != DType::BF16))
    return std::nullopt;
  if (g.mask != MaskKind::None && g.mask != MaskKind::Causal && g.mask != MaskKind::SlidingWindow) return std::nullopt;
  if (g.head_dim % 32 != 0 || g.head_dim > 128 || g.group > 16 || g.kv_len < 2) return std::nullopt;
  QkvParts p;
  for (const plan::Step* s : absorbed) {
    if (std::holds_alternative<ops::Concat>(s->op)) {
      if (s->out.at(0).value == a.in.at(1).value) p.kcat = s;
      if (s->out.at(0).value == a.in.at(2).value) p.vcat = s;
    } else if (std::holds_alternative<ops::Rope>(s->op)) {
      (s->out.at(0).value == a.in.at(0).value ? p.rope_q : p.rope_k) = s;
    }
  }
  if (!p.kcat || !p.vcat || (p.rope_q == nullptr) != (p.rope_k == nullptr)) return std::nullopt;
  for (const plan::Step* c : {p.kcat, p.vcat})
    if (c->in.at(0).loc.kind != plan::Location::Kind::Leaf || c->in.at(1).dims.at(1) != 1 ||
        c->in.at(0).dims.at(1) != g.kv_len - 1)
      return std::nullopt;
  if (p.rope_k && p.rope_k->out.at(0).value != p.kcat->in.at(1).value) return std::nullopt;
  p.q = p.rope_q ? &p.rope_q->in.at(0) : &a.in.at(0);
  p.k = p.rope_k ? &p.rope_k->in.at(0) : &p.kcat->in.at(1);
  p.v = &p.vcat->in.at(1);
  return p;
}

// Whether product step `m` is one the fused kernel runs: one row of A against a param or
// constant weight, in the attention's dtype, with no activation and no residual (a bias is fine).
bool qkv_product(const plan::Step& m, DType t, Precision precision) {
  if (std::holds_alternative<ops::FusedMatMulBiasAct>(m.op)) {
    const auto& f = std::get<ops::FusedMatMulBiasAct>(m.op);
    if (f.activation || f.residual) return false;
  } else if (!std::holds_alternative<ops::MatMul>(m.op)) {
    return false;
  }
  return gemv_rows(m, precision) == 1 && m.out.at(0).dtype == t &&
         m.in.at(1).loc.kind == plan::Location::Kind::Leaf;
}

// Knobs: RLX_CUDA_DECODE_QKV (0: off), RLX_CUDA_DECODE_QKV_CLUSTER (blocks per KV head: 2, 4, 8
// or 16; unset or 0: the largest the device places for every KV head at once),
// RLX_CUDA_DECODE_QKV_WARPS (warps per block, 1-32, default 24).
struct QkvKnobs {
  bool on = true;
  int64_t cluster = 0, warps = 24;
};
QkvKnobs qkv_knobs() {
  QkvKnobs k;
  k.on = env_int("RLX_CUDA_DECODE_QKV", 1, 0, 1) == 1;
  k.cluster = env_int("RLX_CUDA_DECODE_QKV_CLUSTER", 0, 0, 16);
  k.warps = env_int("RLX_CUDA_DECODE_QKV_WARPS", 24, 1, 32);
  if (k.cluster != 0 && (k.cluster < 2 || (k.cluster & (k.cluster - 1)) != 0))
    throw Error("RLX_CUDA_DECODE_QKV_CLUSTER=" + std::to_string(k.cluster) + ": expected 2, 4, 8 or 16 (or 0: chosen)");
  return k;
}

}  // namespace

int64_t decode_qkv_xs_bytes(const GemvConfig& cfg, int64_t k) {
  return ((k + (cfg.prologue == 1 ? 2 * k : 0)) * static_cast<int64_t>(dtype_size(cfg.t)) + 15) / 16 * 16;
}

std::string decode_qkv_source(const GemvConfig& cfg, const DecodeQkvShape& s) {
  if (s.head_dim % 32 != 0 || s.head_dim > 128 || s.group < 1 || s.group > s.warps || s.cluster < 1 ||
      s.cluster > 16 || s.warps < 1 || s.warps > 32 || s.k % 8 != 0 || s.keys_per_block < 1)
    throw Error("CUDA decode QKV kernel: unsupported shape (head_dim " + std::to_string(s.head_dim) + ", group " +
                std::to_string(s.group) + ", cluster " + std::to_string(s.cluster) + ", warps " +
                std::to_string(s.warps) + ", k " + std::to_string(s.k) + ")");
  auto def = [](const char* name, int64_t v) { return "#define " + std::string(name) + " " + std::to_string(v) + "\n"; };
  const std::string defs = gemv_common_defines(cfg) + def("VEC_A", 1) + def("G_STATIC", cfg.gain_static) +
                           def("BF16", s.t == DType::BF16) + def("HD", s.head_dim) + def("G", s.group) +
                           def("C", s.cluster) + def("NW", s.warps) + def("NT", 32 * s.warps) +
                           def("KPC", s.keys_per_block) + def("KN", s.k) + def("LDK", s.k) +
                           def("XS_BYTES", decode_qkv_xs_bytes(cfg, s.k)) + def("MASK", s.mask) +
                           def("SOFTCAP", s.softcap) + def("ROPE", s.rope) + def("ROPE_Q", s.rope) +
                           def("ROPE_K", s.rope) + def("ROPE_STATIC", s.rope_static) + ksrc::kTensorCoreHelpers;
  const std::string body = std::string(ksrc::kGemvPackedStage) + ksrc::kAttentionCommon + ksrc::kAttentionDecodeLoads +
                           ksrc::kClusterHelpers + ksrc::kDecodeCopyRows + ksrc::kAttentionDecodeQkv;
  return kernel_source(body.c_str(),
                       {{"T", storage_type(s.t)}, {"B", storage_type(cfg.bias_t)}, {"M", storage_type(s.t)},
                        {"TC", storage_type(s.tc)}},
                       defs);
}

uint64_t attention_qkv_decodes() { return g_qkv_decodes.load(std::memory_order_relaxed); }

bool decode_qkv_enabled() { return qkv_knobs().on; }

std::map<size_t, size_t> plan_decode_qkv(const plan::Schedule& s, const std::map<size_t, std::vector<size_t>>& taken,
                                         const std::map<size_t, size_t>& prologues, Precision precision) {
  const AbsorbIndex index(s);
  std::map<Value, std::vector<size_t>> readers;  // root value -> steps reading it
  for (size_t i = 0; i < s.steps.size(); ++i)
    for (const plan::TensorRef& r : s.steps[i].in) readers[root_of(r)].push_back(i);
  std::set<Value> outputs;
  for (const plan::TensorRef& r : s.outputs) outputs.insert(root_of(r));
  std::map<Value, size_t> producer;
  for (size_t i = 0; i < s.steps.size(); ++i)
    if (!s.steps[i].out.empty()) producer[s.steps[i].out[0].value] = i;
  std::map<size_t, size_t> out;
  for (const auto& [ai, absorbed_idx] : taken) {
    const plan::Step& a = s.steps[ai];
    if (!std::holds_alternative<ops::Attention>(a.op)) continue;
    std::vector<const plan::Step*> absorbed;
    for (size_t i : absorbed_idx) absorbed.push_back(&s.steps[i]);
    const auto parts = qkv_parts(a, absorbed);
    if (!parts) continue;
    // q, the new K row and the new V row: views of one product's result that nothing else reads.
    const Value root = root_of(*parts->q);
    if (root_of(*parts->k) != root || root_of(*parts->v) != root || outputs.count(root)) continue;
    const auto pi = producer.find(root);
    if (pi == producer.end() || pi->second >= ai || !qkv_product(s.steps[pi->second], a.out.at(0).dtype, precision))
      continue;
    const std::set<size_t> quiet(absorbed_idx.begin(), absorbed_idx.end());
    bool only_here = true;  // the absorbed steps and the attention itself (q without a RoPE)
    for (size_t r : readers[root]) only_here = only_here && (quiet.count(r) || r == ai);
    if (!only_here) continue;
    // The product's inputs (and its prologue's) must hold until the attention runs, also against
    // the attention's own result, which other clusters write while this one still reads A.
    std::set<size_t> silent = quiet;
    silent.insert(pi->second);
    bool survive = index.inputs_survive(pi->second, ai, silent, true);
    const auto pro = prologues.find(pi->second);
    if (pro != prologues.end()) survive = survive && index.inputs_survive(pro->second, ai, silent, true);
    if (survive) out[ai] = pi->second;
  }
  return out;
}

bool lower_decode_qkv(LowerContext& cx, const plan::Step& st, const plan::Step& mm,
                      const std::vector<const plan::Step*>& absorbed) {
  const QkvKnobs knobs = qkv_knobs();
  const auto parts = qkv_parts(st, absorbed);
  const DeviceInfo& dev = device();
  if (!knobs.on || !parts || dev.cc_major < 9 || !driver().launch_kernel_ex) return false;
  const auto& g = std::get<plan::AttentionGeom>(st.geom);
  const auto& mg = std::get<plan::MatMulGeom>(mm.geom);
  const DType t = st.out.at(0).dtype;
  const int64_t es = 2, vw = 8, hd = g.head_dim, grp = g.group, kv_heads = g.num_heads / g.group;
  if (grp > knobs.warps) return false;
  // The product's configuration (its absorbed RmsNorm as the prologue); A in 16-byte words.
  const int64_t bias_len = std::holds_alternative<ops::FusedMatMulBiasAct>(mm.op) ? mg.bias_len : 0;
  GemvPrologue pro;
  GemvConfig cfg = gemv_common(cx, mm, mg, 1, bias_len, nullptr, pro);
  const void* a_src = cfg.prologue ? static_cast<const void*>(pro.px) : static_cast<const void*>(cx.ptr(mm.in.at(0)));
  if (cfg.prologue == 2 || cfg.act || mg.k % vw != 0 || pointer_alignment(a_src) < 16) return false;
  cfg.vec_a = true;
  // The caches and the new rows.
  const SplitKv ks = split_kv(cx, *parts->kcat, g.layout), vs = split_kv(cx, *parts->vcat, g.layout);
  if (ks.split != g.kv_len - 1 || vs.split != ks.split || !ks.first_static || !vs.first_static) return false;
  for (const plan::AttnStrides* s : {&ks.first_strides, &vs.first_strides})
    if (s->seq % vw != 0 || s->head % vw != 0) return false;
  if (pointer_alignment(ks.first) < 16 || pointer_alignment(vs.first) < 16) return false;
  // The columns of q, k and v in the product (dense views of its one row).
  const uint8_t* c0 = cx.ptr(mm.out.at(0));
  auto column = [&](const plan::TensorRef& r) { return static_cast<int64_t>(cx.ptr(r) - c0) / es; };
  const int64_t col_q = column(*parts->q), col_k = column(*parts->k), col_v = column(*parts->v);
  if (col_q < 0 || col_k < 0 || col_v < 0 || col_q + g.num_heads * hd > mg.n || col_k + kv_heads * hd > mg.n ||
      col_v + kv_heads * hd > mg.n)
    return false;
  const int64_t ldk = mg.k;
  const std::string what = step_label(st);
  uint8_t* pw = cx.packed_weight(mm.in.at(1), mg.k, mg.n, ldk, step_label(mm));
  if (!pw) return false;

  AttnArgs a = attention_args(cx, st);
  a.k = ks.first, a.v = vs.first, a.k_split = ks.split, a.v_split = vs.split;
  a.ks_b = ks.first_strides.batch, a.ks_s = ks.first_strides.seq, a.ks_h = ks.first_strides.head;
  a.vs_b = vs.first_strides.batch, a.vs_s = vs.first_strides.seq, a.vs_h = vs.first_strides.head;
  if (parts->rope_q) set_rope_args(cx, a, *parts->rope_q);
  const bool rope_static = parts->rope_q && parts->rope_q->in.at(1).loc.kind == plan::Location::Kind::Leaf &&
                           parts->rope_q->in.at(2).loc.kind == plan::Location::Kind::Leaf;
  const DType tc = parts->rope_q ? parts->rope_q->in.at(1).dtype : t;

  const int64_t visible = g.mask == MaskKind::SlidingWindow ? std::min(g.kv_len, g.window) : g.kv_len;
  const int64_t xs_bytes = decode_qkv_xs_bytes(cfg, mg.k);
  auto smem_for = [&](int64_t c) {
    const int64_t kpc = (visible + c - 1) / c, epc = (grp * hd + c - 1) / c;
    return static_cast<size_t>(xs_bytes + ((grp + 2) * hd + grp * hd) * 4 + 2 * kpc * (hd + 8) * es +
                               c * epc * 4 + c * grp * 2 * 4);
  };
  DecodeQkvShape shape;
  shape.t = t, shape.tc = tc, shape.head_dim = hd, shape.group = grp, shape.warps = knobs.warps, shape.k = mg.k;
  shape.mask = attention_mask_code(g.mask), shape.softcap = g.softcap > 0;
  shape.rope = parts->rope_q != nullptr, shape.rope_static = rope_static;
  auto compile = [&](int64_t c) {
    shape.cluster = c, shape.keys_per_block = (visible + c - 1) / c;
    const std::string src = decode_qkv_source(cfg, shape);
    const CUfunction fn = get_kernel("attn_decode_qkv", src);
    allow_dynamic_smem(fn, smem_for(c));
    if (c > 8) RLX_CU_CHECK(driver().func_set_attribute(fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
    return fn;
  };
  // Blocks per KV head: the knob's, else the largest (at most 16, every block on its own
  // multiprocessor) whose clusters the device places for every KV head at once.
  std::vector<int64_t> sizes = {knobs.cluster};
  if (knobs.cluster == 0) sizes = {16, 8, 4, 2};
  const unsigned threads = static_cast<unsigned>(32 * knobs.warps);
  for (int64_t c : sizes) {
    if (c * kv_heads > dev.sm_count && knobs.cluster == 0) continue;
    if (smem_for(c) > dev.smem_per_block_optin) continue;
    const CUfunction fn = compile(c);
    auto k = std::make_shared<KernelLaunch>(what + " decode (QKV product + attention)", fn,
                                            static_cast<unsigned>(c * kv_heads), threads,
                                            static_cast<unsigned>(smem_for(c)));
    k->cluster(static_cast<unsigned>(c));
    const int placed = k->max_active_clusters();
    if (knobs.cluster == 0 && placed >= 0 && placed < kv_heads) continue;
    if (placed == 0) continue;
    k->pdl_prefetch();  // the weight's first words and the cached rows go before the wait
    struct QkvArgs {
      const void *a, *w, *bias, *px, *pg, *pb;
      float eps;
      int64_t col_q, col_k, col_v, q_h, k_h, v_h;
    } f{cx.ptr(mm.in.at(0)), pw, bias_len > 0 ? cx.ptr(mm.in.at(2)) : nullptr, pro.px, pro.pg, pro.pb, pro.eps,
        col_q, col_k, col_v, hd, hd, hd};
    k->arg(f).arg(a);
    const size_t pf_arg = k->arg_count();
    k->arg(static_cast<const uint8_t*>(nullptr)).arg(int64_t{0});
    join_weight_stream(cx, k, pf_arg, pw, static_cast<size_t>(mg.n * ldk * es), cfg.evict_first);
    cx.add([k](cudaStream_t s) { k->launch(s); });
    g_qkv_decodes.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  return false;
}

}  // namespace rlx::cuda
