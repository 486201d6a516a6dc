// Attention: the flash-style kernel of kernels/attention.h, with the KV range split across
// blocks (and a combine kernel) when the query rows alone cannot fill the GPU (decode).
#include <algorithm>
#include <array>

#include "backends/cuda/cuda_types.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/launch.h"
#include "backends/cuda/lower.h"
#include "backends/cuda/lower_attention_mma.h"
#include "backends/cuda/status.h"
#include "rlx/error.h"

namespace rlx::cuda {
namespace {

constexpr int64_t kQB = 16, kKT = 32;  // must match QB / KT of the kernel source

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
};

// The attention kernel `fn` over `grid` (128 threads), then, when the keys are split, the
// combine kernel of the same source merging the splits' partials (allocated here).
void add_attention_launches(LowerContext& cx, const std::string& what, CUfunction fn, const std::string& src,
                            AttnArgs a, const plan::AttentionGeom& g, int64_t splits,
                            const std::array<unsigned, 3>& grid, size_t smem) {
  if (splits > 1) {
    const size_t part_bytes = static_cast<size_t>(splits * g.batch * g.num_heads * g.q_len * (g.head_dim + 2)) * 4;
    a.part = reinterpret_cast<float*>(cx.scratch(part_bytes, what + " split partials"));
  }
  auto main = std::make_shared<KernelLaunch>(what, fn, grid[0], 128, static_cast<unsigned>(smem), grid[1], grid[2]);
  main->pdl();
  main->arg(a);
  cx.add([main](cudaStream_t s) { main->launch(s); });
  if (splits <= 1) return;
  const int64_t rows = g.batch * g.num_heads * g.q_len;
  auto comb = std::make_shared<KernelLaunch>(what + " combine", get_kernel("attn_combine", src),
                                             grid_for(rows * 32, 256), 256);
  comb->pdl();
  comb->arg(a).arg(static_cast<int32_t>(splits));
  cx.add([comb](cudaStream_t s) { comb->launch(s); });
}

// Decode (few query rows per KV head): the attn_decode kernel of kernels/attention.h, one block
// per (key split, kv head, batch) for the whole head group. Returns false when the step does not
// qualify (more than 8 rows per KV head, head rows not in 16-byte pieces, unaligned strides).
bool try_decode(LowerContext& cx, const plan::Step& st, const plan::AttentionGeom& g, AttnArgs a, DType t, DType mt) {
  const int64_t es = static_cast<int64_t>(dtype_size(t)), ve = 16 / es;
  const int64_t rows = g.q_len * g.group;
  const int64_t row_bytes = g.head_dim * es;
  if (rows > 8 || row_bytes % 16 != 0) return false;
  const int64_t lpk = row_bytes / 16;
  if (lpk > 32 || (lpk & (lpk - 1)) != 0) return false;
  for (int64_t s : {g.k.batch, g.k.seq, g.k.head, g.v.batch, g.v.seq, g.v.head})
    if (s % ve != 0) return false;
  if (pointer_alignment(a.k) < 16 || pointer_alignment(a.v) < 16) return false;
  const int64_t ng = 4 * (32 / lpk);
  const size_t smem = static_cast<size_t>(rows * g.head_dim + ng * rows * (g.head_dim + 2)) * 4;
  if (smem > 48 * 1024) return false;
  const int64_t kv_heads = g.num_heads / g.group;
  if (g.batch > 65535 || kv_heads > 65535) return false;

  const std::string what = step_label(st);
  const int64_t blocks = g.batch * kv_heads;
  const int64_t target = 2 * static_cast<int64_t>(device().sm_count);
  int64_t splits = std::clamp<int64_t>((target + blocks - 1) / blocks, 1, std::max<int64_t>(1, g.kv_len / (2 * ng)));
  splits = std::min<int64_t>(splits, 64);
  int64_t split_len = (g.kv_len + splits - 1) / splits;
  splits = std::max<int64_t>(1, (g.kv_len + split_len - 1) / split_len);
  a.split_len = split_len;
  const std::string defs = "#define HD " + std::to_string(g.head_dim) + "\n#define LPK " + std::to_string(lpk) +
                           "\n#define R " + std::to_string(rows) + "\n";
  const std::string body = std::string(ksrc::kAttentionCommon) + ksrc::kAttentionDecode + ksrc::kAttentionCombine;
  const std::string src = kernel_source(body.c_str(), {{"T", storage_type(t)}, {"M", storage_type(mt)}}, defs);
  add_attention_launches(cx, what + " decode", get_kernel("attn_decode", src), src, a, g, splits,
                         {static_cast<unsigned>(splits), static_cast<unsigned>(kv_heads), static_cast<unsigned>(g.batch)},
                         smem);
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
  if (lower_attention_mma(cx, st)) return;  // f16/bf16 prefill on the tensor cores
  const bool has_mask = g.mask == MaskKind::Custom || g.mask == MaskKind::Bias;
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
  switch (g.mask) {
    case MaskKind::None: a.mask_kind = 0; break;
    case MaskKind::Causal: a.mask_kind = 1; break;
    case MaskKind::SlidingWindow: a.mask_kind = 2; break;
    case MaskKind::Custom: a.mask_kind = 3; break;
    case MaskKind::Bias: a.mask_kind = 4; break;
  }
  a.window = g.window;
  a.mask_batch = g.mask_batch_stride;
  for (int i = 0; i < 4; ++i) a.bias_s[i] = g.bias_strides[i];

  if (try_decode(cx, st, g, a, t, mt)) return;

  // Split the keys when the (batch, head, query block) grid is smaller than two waves.
  const int64_t qblocks = (g.q_len + kQB - 1) / kQB;
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
                                        "#define HD " + std::to_string(g.head_dim) + "\n");
  const CUfunction fn = get_kernel("attention", src);
  const size_t smem = static_cast<size_t>(kQB * g.head_dim + kKT * (g.head_dim + 4) + kKT * g.head_dim) * 4;
  if (smem > device().smem_per_block_optin)
    throw Error(what + ": attention with head_dim " + std::to_string(g.head_dim) + " needs " + std::to_string(smem) +
                " bytes of shared memory, the device allows " + std::to_string(device().smem_per_block_optin));
  if (smem > 48 * 1024)
    RLX_CU_CHECK(driver().func_set_attribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(smem)));
  if (g.batch * g.num_heads > 65535) throw Error(what + ": CUDA attention supports batch * heads <= 65535");
  add_attention_launches(cx, what, fn, src, a, g, splits,
                         {static_cast<unsigned>(qblocks), static_cast<unsigned>(g.batch * g.num_heads),
                          static_cast<unsigned>(splits)},
                         smem);
}

}  // namespace rlx::cuda
