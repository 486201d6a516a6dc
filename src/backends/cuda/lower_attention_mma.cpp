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
#include "backends/cuda/kernels/attention_wgmma.h"
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
std::atomic<uint64_t> g_wgmma_steps{0};

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

AttnWgmmaTile attention_wgmma_tile(int64_t head_dim) {
  const char* env = std::getenv("RLX_CUDA_ATTN_WGMMA");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0)
    return head_dim <= 64 ? AttnWgmmaTile{2, 128} : AttnWgmmaTile{2, 128};
  AttnWgmmaTile t;
  char tail = 0;
  if (std::sscanf(env, "%d,%d%c", &t.groups, &t.keys, &tail) != 2 || !one_of(t.groups, {1, 2, 3}) ||
      !one_of(t.keys, {64, 128}))
    throw Error(std::string("RLX_CUDA_ATTN_WGMMA='") + env +
                "' is not '0' (off), '1' (the default tile) or '<warpgroups>,<keys>' with warpgroups 1/2/3 and "
                "keys 64/128 (e.g. '2,128')");
  return t;
}

size_t attention_wgmma_smem(const AttnWgmmaTile& tile, int64_t head_dim) {
  return static_cast<size_t>(tile.rows() + 4 * tile.keys) * static_cast<size_t>(head_dim) * 2 + 1024;
}

std::string attention_wgmma_rejection(int64_t head_dim, int cc_major, int cc_minor) {
  if (const char* e = std::getenv("RLX_CUDA_ATTN_WGMMA"); e != nullptr && std::strcmp(e, "0") == 0)
    return "turned off by RLX_CUDA_ATTN_WGMMA=0";
  if (cc_major != 9 || cc_minor != 0)
    return "wgmma needs sm_90, the device is sm_" + std::to_string(cc_major) + std::to_string(cc_minor);
  if (head_dim != 64 && head_dim != 128) return "head_dim " + std::to_string(head_dim) + " (64 or 128 only)";
  return "";
}

std::string attention_wgmma_wrappers(DType t, int qk_n, int pv_n) {
  const std::string ty = t == DType::BF16 ? "bf16" : "f16";
  auto regs = [](int n) {
    std::string r = "{";
    for (int i = 0; i < n; ++i) r += (i ? ", %" : "%") + std::to_string(i);
    return r + "}";
  };
  auto outs = [](int n) {
    std::string r;
    for (int i = 0; i < n; ++i) r += (i ? ", \"+f\"(d[" : "\"+f\"(d[") + std::to_string(i) + "])";
    return r;
  };
  std::ostringstream s;
  const int q = qk_n / 2, p = pv_n / 2;
  s << "__device__ __forceinline__ void wg_qk(float* d, unsigned long long da, unsigned long long db, int acc) {\n"
    << "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" << q + 2 << ", 0;\\n\"\n"
    << "    \"wgmma.mma_async.sync.aligned.m64n" << qk_n << "k16.f32." << ty << "." << ty << " " << regs(q) << ", %"
    << q << ", %" << q + 1 << ", p, 1, 1, 0, 0;\\n}\\n\"\n"
    << "    : " << outs(q) << "\n    : \"l\"(da), \"l\"(db), \"r\"(acc));\n}\n";
  s << "__device__ __forceinline__ void wg_pv(float* d, const unsigned* a, unsigned long long db) {\n"
    << "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n\"\n"
    << "    \"wgmma.mma_async.sync.aligned.m64n" << pv_n << "k16.f32." << ty << "." << ty << " " << regs(p) << ", {%"
    << p << ", %" << p + 1 << ", %" << p + 2 << ", %" << p + 3 << "}, %" << p + 4 << ", p, 1, 1, 1;\\n}\\n\"\n"
    << "    : " << outs(p) << "\n    : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(db));\n}\n";
  return s.str();
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
  const DeviceInfo& dev = device();
  const bool wgmma = attention_wgmma_rejection(g.head_dim, dev.cc_major, dev.cc_minor).empty();
  int rows = 0, threads = 0;
  size_t smem = 0;
  std::string tile_name, knob;
  if (wgmma) {
    const AttnWgmmaTile tile = attention_wgmma_tile(g.head_dim);
    rows = tile.rows(), threads = 128 * tile.groups, smem = attention_wgmma_smem(tile, g.head_dim);
    tile_name = std::to_string(tile.groups) + "," + std::to_string(tile.keys), knob = "RLX_CUDA_ATTN_WGMMA";
  } else {
    const AttnMmaTile tile = attention_mma_tile(g.head_dim);
    rows = tile.rows(), threads = 32 * tile.warps, smem = attention_mma_smem(tile, g.head_dim);
    tile_name = std::to_string(tile.warps) + "," + std::to_string(tile.m_tiles) + "," + std::to_string(tile.keys),
    knob = "RLX_CUDA_ATTN_TILE";
  }
  if (smem > dev.smem_per_block_optin)
    throw Error(what + ": the attention tile " + tile_name + " needs " + std::to_string(smem) +
                " bytes of shared memory at head_dim " + std::to_string(g.head_dim) + ", the device allows " +
                std::to_string(dev.smem_per_block_optin) + "; choose a smaller " + knob);
  const int64_t q_blocks = (g.q_len + rows - 1) / rows;

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
  defs << "#define BF16 " << (t == DType::BF16 ? 1 : 0) << "\n#define HD " << g.head_dim << "\n#define MASK " << mask
       << "\n#define SOFTCAP " << (softcap ? 1 : 0) << "\n";
  CUfunction fn = nullptr;
  if (wgmma) {
    const AttnWgmmaTile tile = attention_wgmma_tile(g.head_dim);
    defs << "#define NWG " << tile.groups << "\n#define BN " << tile.keys << "\n"
         << attention_wgmma_wrappers(t, tile.keys, static_cast<int>(g.head_dim));
    fn = get_kernel("attention_wgmma", kernel_source(ksrc::kAttentionWgmma, {{"T", storage_type(t)}}, defs.str()),
                    "sm_90a");
  } else {
    const AttnMmaTile tile = attention_mma_tile(g.head_dim);
    defs << "#define NW " << tile.warps << "\n#define MT " << tile.m_tiles << "\n#define BN " << tile.keys
         << "\n#define QREG " << (tile.q_in_regs ? 1 : 0) << "\n";
    fn = get_kernel("attention_mma", kernel_source(ksrc::kAttentionMma, {{"T", storage_type(t)}}, defs.str()));
  }
  if (smem > 48 * 1024)
    RLX_CU_CHECK(driver().func_set_attribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(smem)));
  auto launch = std::make_shared<KernelLaunch>(what + (wgmma ? " (wgmma)" : " (tensor cores)"), fn,
                                               static_cast<unsigned>(q_blocks), static_cast<unsigned>(threads),
                                               static_cast<unsigned>(smem), static_cast<unsigned>(g.batch * g.num_heads));
  launch->arg(a);
  cx.add([launch](cudaStream_t s) { launch->launch(s); });
  g_mma_steps.fetch_add(1, std::memory_order_relaxed);
  if (wgmma) g_wgmma_steps.fetch_add(1, std::memory_order_relaxed);
  return true;
}

uint64_t attention_mma_steps() { return g_mma_steps.load(std::memory_order_relaxed); }
uint64_t attention_wgmma_steps() { return g_wgmma_steps.load(std::memory_order_relaxed); }

}  // namespace rlx::cuda
