// Attention on the tensor cores (kernels/attention_mma.h): eligibility, tile choice and the
// launch. lower_attention() tries this first; everything it rejects runs on the CUDA-core kernel.
#include "backends/cuda/lower_attention_mma.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <sstream>

#include "backends/cuda/cuda_types.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/kernels/attention_mma.h"
#include "backends/cuda/launch.h"
#include "backends/cuda/status.h"
#include "rlx/error.h"

namespace rlx::cuda {
namespace {

// Must match struct AttnMmaArgs of the kernel source.
struct AttnMmaArgs {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  int64_t qs_b, qs_s, qs_h, ks_b, ks_s, ks_h, vs_b, vs_s, vs_h, os_b, os_s, os_h;
  int64_t q_len, kv_len, heads, group, window;
  float scale_log2, cap_in, cap_out;
  int32_t q_blocks;
};

constexpr double kLog2e = 1.4426950408889634;
std::atomic<uint64_t> g_mma_steps{0};

bool one_of(int x, std::initializer_list<int> xs) {
  for (int y : xs)
    if (x == y) return true;
  return false;
}

// The fastest tiles of the H100 sweep (docs/backends/cuda.md, attention) without register
// spills: 128 query rows per block, so each K/V tile is read from L2 once per 128 rows.
AttnMmaTile default_tile(int64_t head_dim) {
  if (head_dim <= 64) return {4, 2, 64, true};
  if (head_dim <= 128) return {8, 1, 128, false};
  return {4, 1, 32, false};  // 256: the accumulators alone take 128 registers
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

AttnMmaTile attention_mma_tile(int64_t head_dim) {
  const char* env = std::getenv("RLX_CUDA_ATTN_TILE");
  if (env == nullptr || *env == '\0') return default_tile(head_dim);
  AttnMmaTile t;
  int qreg = -1;
  char tail = 0;
  if (std::sscanf(env, "%d,%d,%d,%d%c", &t.warps, &t.m_tiles, &t.keys, &qreg, &tail) != 4 ||
      !one_of(t.warps, {1, 2, 4, 8}) || !one_of(t.m_tiles, {1, 2}) || !one_of(t.keys, {16, 32, 64, 128}) ||
      !one_of(qreg, {0, 1}))
    throw Error(std::string("RLX_CUDA_ATTN_TILE='") + env +
                "' is not '<warps>,<m_tiles>,<keys>,<q_in_regs>' with warps 1/2/4/8, m_tiles 1/2, keys "
                "16/32/64/128 and q_in_regs 0/1 (e.g. '4,2,32,0'); unset it for the default tile");
  t.q_in_regs = qreg == 1;
  return t;
}

size_t attention_mma_smem(const AttnMmaTile& tile, int64_t head_dim) {
  return static_cast<size_t>(tile.rows() + 4 * tile.keys) * static_cast<size_t>(head_dim + 8) * 2;
}

std::string attention_mma_rejection(const plan::AttentionGeom& g, DType t, const void* q, const void* k,
                                    const void* v, const void* out) {
  if (const char* e = std::getenv("RLX_CUDA_ATTN_MMA"); e != nullptr && std::strcmp(e, "0") == 0)
    return "turned off by RLX_CUDA_ATTN_MMA=0";
  if (t != DType::F16 && t != DType::BF16) return std::string("dtype ") + dtype_name(t) + " (f16/bf16 only)";
  if (g.mask == MaskKind::Custom || g.mask == MaskKind::Bias) return std::string("mask ") + enum_name(g.mask);
  if (g.head_dim <= 0 || g.head_dim % 16 != 0 || g.head_dim > 256)
    return "head_dim " + std::to_string(g.head_dim) + " (a multiple of 16 up to 256 only)";
  if (g.q_len < 16) return "q_len " + std::to_string(g.q_len) + " < 16 (decode runs on the split-KV kernel)";
  if (g.batch * g.num_heads > 65535) return "batch * heads > 65535";
  if (g.q_len / 16 > INT32_MAX) return "q_len too long for one grid";
  for (const plan::AttnStrides* s : {&g.q, &g.k, &g.v, &g.out})
    if (s->batch % 8 != 0 || s->seq % 8 != 0 || s->head % 8 != 0)
      return "a row stride that is not a multiple of 8 elements (16-byte rows)";
  if (!aligned16(q) || !aligned16(k) || !aligned16(v) || !aligned16(out)) return "an operand not 16-byte aligned";
  return "";
}

bool lower_attention_mma(LowerContext& cx, const plan::Step& st) {
  const auto& g = std::get<plan::AttentionGeom>(st.geom);
  const plan::TensorRef& out = st.out.at(0);
  const DType t = out.dtype;
  if (st.in.size() != 3 || st.in[0].dtype != t || st.in[1].dtype != t || st.in[2].dtype != t) return false;
  const void* pq = cx.ptr(st.in[0]);
  const void* pk = cx.ptr(st.in[1]);
  const void* pv = cx.ptr(st.in[2]);
  void* po = cx.ptr(out);
  if (!attention_mma_rejection(g, t, pq, pk, pv, po).empty()) return false;

  const std::string what = step_label(st);
  const AttnMmaTile tile = attention_mma_tile(g.head_dim);
  const size_t smem = attention_mma_smem(tile, g.head_dim);
  if (smem > device().smem_per_block_optin)
    throw Error(what + ": the attention tile " + std::to_string(tile.warps) + "," + std::to_string(tile.m_tiles) + "," +
                std::to_string(tile.keys) + " needs " + std::to_string(smem) + " bytes of shared memory at head_dim " +
                std::to_string(g.head_dim) + ", the device allows " + std::to_string(device().smem_per_block_optin) +
                "; choose a smaller RLX_CUDA_ATTN_TILE");
  const int64_t q_blocks = (g.q_len + tile.rows() - 1) / tile.rows();

  AttnMmaArgs a{};
  a.q = pq, a.k = pk, a.v = pv, a.out = po;
  a.qs_b = g.q.batch, a.qs_s = g.q.seq, a.qs_h = g.q.head;
  a.ks_b = g.k.batch, a.ks_s = g.k.seq, a.ks_h = g.k.head;
  a.vs_b = g.v.batch, a.vs_s = g.v.seq, a.vs_h = g.v.head;
  a.os_b = g.out.batch, a.os_s = g.out.seq, a.os_h = g.out.head;
  a.q_len = g.q_len, a.kv_len = g.kv_len, a.heads = g.num_heads, a.group = g.group, a.window = g.window;
  const bool softcap = g.softcap > 0;
  a.scale_log2 = static_cast<float>(g.scale * kLog2e);
  a.cap_in = softcap ? static_cast<float>(g.scale / g.softcap) : 0.f;
  a.cap_out = softcap ? static_cast<float>(g.softcap * kLog2e) : 0.f;
  a.q_blocks = static_cast<int32_t>(q_blocks);

  const int mask = g.mask == MaskKind::Causal ? 1 : g.mask == MaskKind::SlidingWindow ? 2 : 0;
  std::ostringstream defs;
  defs << "#define BF16 " << (t == DType::BF16 ? 1 : 0) << "\n#define HD " << g.head_dim << "\n#define NW "
       << tile.warps << "\n#define MT " << tile.m_tiles << "\n#define BN " << tile.keys << "\n#define MASK " << mask
       << "\n#define SOFTCAP " << (softcap ? 1 : 0) << "\n#define QREG " << (tile.q_in_regs ? 1 : 0) << "\n";
  const CUfunction fn =
      get_kernel("attention_mma", kernel_source(ksrc::kAttentionMma, {{"T", storage_type(t)}}, defs.str()));
  if (smem > 48 * 1024)
    RLX_CU_CHECK(driver().func_set_attribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(smem)));
  auto launch = std::make_shared<KernelLaunch>(what + " (tensor cores)", fn, static_cast<unsigned>(q_blocks),
                                               static_cast<unsigned>(32 * tile.warps), static_cast<unsigned>(smem),
                                               static_cast<unsigned>(g.batch * g.num_heads));
  launch->arg(a);
  cx.add([launch](cudaStream_t s) { launch->launch(s); });
  g_mma_steps.fetch_add(1, std::memory_order_relaxed);
  return true;
}

uint64_t attention_mma_steps() { return g_mma_steps.load(std::memory_order_relaxed); }

}  // namespace rlx::cuda
