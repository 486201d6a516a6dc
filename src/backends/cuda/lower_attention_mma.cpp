// Attention on the tensor cores (kernels/attention_mma.h): eligibility, tile choice and the
// launch. lower_attention() tries this first; everything it rejects runs on the CUDA-core kernel.
#include "backends/cuda/lower_attention_mma.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <sstream>

#include "backends/cuda/cuda_types.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/kernels/attention_mma.h"
#include "backends/cuda/kernels/mma.h"
#include "backends/cuda/kernels/attention_wgmma.h"
#include "backends/cuda/launch.h"
#include "backends/cuda/status.h"
#include "rlx/error.h"
#include "runtime/knobs.h"

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

namespace {

AttnMmaTile mma_tile(int64_t head_dim, const ResolvedKnobs& knobs) {
  const std::string& spec = knobs.cuda_attn_tile();
  if (spec.empty()) return default_tile(head_dim);
  AttnMmaTile t;
  int qreg = -1;
  char tail = 0;
  if (std::sscanf(spec.c_str(), "%d,%d,%d,%d%c", &t.warps, &t.m_tiles, &t.keys, &qreg, &tail) != 4 ||
      !one_of(t.warps, {1, 2, 4, 8}) || !one_of(t.m_tiles, {1, 2}) || !one_of(t.keys, {16, 32, 64, 128}) ||
      !one_of(qreg, {0, 1}))
    throw Error(knobs.origin("cuda_attn_tile") + "='" + spec +
                "' is not '<warps>,<m_tiles>,<keys>,<q_in_regs>' with warps 1/2/4/8, m_tiles 1/2, keys "
                "16/32/64/128 and q_in_regs 0/1 (e.g. '4,2,32,0'); unset it for the default tile");
  t.q_in_regs = qreg == 1;
  return t;
}

// "turned off by <where>" when knob `name` is off (`off_member`: the member's value then), else "".
std::string turned_off(const ResolvedKnobs& knobs, bool on, const char* name, const char* off_member) {
  if (on) return "";
  const std::string where = knobs.origin(name);
  return "turned off by " + where + (where.rfind("RLX_", 0) == 0 ? "=0" : std::string(" = ") + off_member);
}

std::string mma_rejection(const plan::AttentionGeom& g, DType t, const void* q, const void* k, const void* v,
                          const void* out, bool custom_masks, const ResolvedKnobs& knobs) {
  if (std::string off = turned_off(knobs, knobs.cuda_attn_mma(), "cuda_attn_mma", "false"); !off.empty()) return off;
  if (t != DType::F16 && t != DType::BF16) return std::string("dtype ") + dtype_name(t) + " (f16/bf16 only)";
  if (g.mask == MaskKind::Positions) return "mask positions (the generic attention kernel applies it)";
  if (!custom_masks && (g.mask == MaskKind::Custom || g.mask == MaskKind::Bias))
    return std::string("mask ") + enum_name(g.mask) + " (only the Hopper wgmma kernel applies custom masks and biases)";
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

AttnWgmmaTile wgmma_tile(int64_t head_dim, const ResolvedKnobs& knobs) {
  const std::string& spec = knobs.cuda_attn_wgmma();
  if (spec.empty() || spec == "0" || spec == "1") {
    // The fastest of the H100 sweep (docs/backends/cuda.md); the pipelined variant measured slower.
    AttnWgmmaTile t = head_dim <= 64 ? AttnWgmmaTile{1, 128, 2, 2} : AttnWgmmaTile{3, 64, 3, 1};
    t.pipelined = false;
    return t;
  }
  AttnWgmmaTile t;
  int pipe = 1;
  char tail = 0;
  const char* env = spec.c_str();
  const bool five = std::sscanf(env, "%d,%d,%d,%d,%d%c", &t.groups, &t.keys, &t.stages, &t.blocks, &pipe, &tail) == 5;
  if ((!five && std::sscanf(env, "%d,%d,%d,%d%c", &t.groups, &t.keys, &t.stages, &t.blocks, &tail) != 4) ||
      !one_of(t.groups, {1, 2, 3}) || !one_of(t.keys, {64, 128}) || !one_of(t.stages, {2, 3}) ||
      !one_of(t.blocks, {1, 2}) || !one_of(pipe, {0, 1}))
    throw Error(knobs.origin("cuda_attn_wgmma") + "='" + spec +
                "' is not '0' (off), '1' (the default tile) or '<warpgroups>,<keys>,<stages>,<blocks per SM>"
                "[,<pipelined>]' with warpgroups 1/2/3, keys 64/128, stages 2/3, blocks 1/2 and pipelined 0/1 "
                "(e.g. '2,128,2,1')");
  t.pipelined = pipe == 1;
  return t;
}

std::string wgmma_rejection(int64_t head_dim, int cc_major, int cc_minor, const ResolvedKnobs& knobs) {
  if (std::string off = turned_off(knobs, knobs.cuda_attn_wgmma() != "0", "cuda_attn_wgmma", "\"0\""); !off.empty())
    return off;
  if (cc_major != 9 || cc_minor != 0)
    return "wgmma needs sm_90, the device is sm_" + std::to_string(cc_major) + std::to_string(cc_minor);
  if (head_dim != 64 && head_dim != 128) return "head_dim " + std::to_string(head_dim) + " (64 or 128 only)";
  return "";
}

}  // namespace

// The public forms (tests, tools) read the knobs of a default CompileOptions: the environment.
AttnMmaTile attention_mma_tile(int64_t head_dim) { return mma_tile(head_dim, resolve_knobs(CompileOptions{})); }

size_t attention_mma_smem(const AttnMmaTile& tile, int64_t head_dim) {
  return static_cast<size_t>(tile.rows() + 4 * tile.keys) * static_cast<size_t>(head_dim + 8) * 2;
}

std::string attention_mma_rejection(const plan::AttentionGeom& g, DType t, const void* q, const void* k,
                                    const void* v, const void* out, bool custom_masks) {
  return mma_rejection(g, t, q, k, v, out, custom_masks, resolve_knobs(CompileOptions{}));
}

AttnWgmmaTile attention_wgmma_tile(int64_t head_dim) { return wgmma_tile(head_dim, resolve_knobs(CompileOptions{})); }

int AttnWgmmaTile::consumer_regs() const {
  // At launch every thread gets the same share of the SM's 64K registers (split over `blocks`
  // blocks); the producer then gives all but producer_regs() of its share to the consumers. A
  // multiple of 8, at most 240; 0 when that is no more than the launch share (no hand-over).
  const int at_launch = launch_regs();
  const int after = std::min(240, (65536 / blocks - 128 * producer_regs()) / (128 * groups) / 8 * 8);
  return after > at_launch ? after : 0;
}

int AttnWgmmaTile::launch_regs() const { return std::min(248, 65536 / (blocks * threads()) / 8 * 8); }

size_t attention_wgmma_smem(const AttnWgmmaTile& tile, int64_t head_dim) {
  const size_t tiles = static_cast<size_t>(tile.rows() + 2 * tile.stages * tile.keys) * static_cast<size_t>(head_dim) * 2;
  return tiles + 1024 + 8 * (1 + 2 * static_cast<size_t>(tile.stages));
}

std::string attention_wgmma_rejection(int64_t head_dim, int cc_major, int cc_minor) {
  return wgmma_rejection(head_dim, cc_major, cc_minor, resolve_knobs(CompileOptions{}));
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

namespace {

// Must match struct AttnTmaArgs of kernels/attention_wgmma.h.
struct AttnTmaArgs {
  CUtensorMap q, k, v;
  void* out;
  int64_t os_b, os_s, os_h;
  int64_t q_len, kv_len, heads, group, window;
  float scale_log2, cap_in, cap_out;
  int32_t q_blocks;
  const void* mask;
  int64_t mask_batch, bias_s[4];
};

// A 4-d (head_dim, seq, heads, batch) tensor map over `base` with boxes of 64 x box_rows
// elements in the 128-byte swizzle.
CUtensorMap tensor_map(const std::string& what, DType t, const void* base, const plan::AttnStrides& st,
                       int64_t head_dim, int64_t seq, int64_t heads, int64_t batch, int box_rows) {
  CUtensorMap m;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(seq),
                              static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(st.seq) * 2, static_cast<cuuint64_t>(st.head) * 2,
                                 static_cast<cuuint64_t>(st.batch) * 2};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t elem[4] = {1, 1, 1, 1};
  try {
    RLX_CU_CHECK(driver().tensor_map_encode_tiled(
        &m, t == DType::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
        const_cast<void*>(base), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  } catch (const Error& e) {
    throw Error(what + ": no tensor map for an attention operand (" + e.what() +
                "); set RLX_CUDA_ATTN_WGMMA=0 to run it on the mma.sync kernel");
  }
  return m;
}

// The fields both kernels' arguments share: output, lengths, heads, window, scales, grid.
template <class Args>
void set_common_args(Args& a, const plan::AttentionGeom& g, void* out, int64_t q_blocks) {
  a.out = out;
  a.os_b = g.out.batch, a.os_s = g.out.seq, a.os_h = g.out.head;
  a.q_len = g.q_len, a.kv_len = g.kv_len, a.heads = g.num_heads, a.group = g.group, a.window = g.window;
  const bool softcap = g.softcap > 0;
  a.scale_log2 = static_cast<float>(g.scale * kLog2e);
  a.cap_in = softcap ? static_cast<float>(g.scale / g.softcap) : 0.f;
  a.cap_out = softcap ? static_cast<float>(g.softcap * kLog2e) : 0.f;
  a.q_blocks = static_cast<int32_t>(q_blocks);
}

bool fits_int32(int64_t x) { return x >= 0 && x <= INT32_MAX; }

// The defines both kernels take, then their shared helpers (which need BF16).
std::string defines(DType t, const plan::AttentionGeom& g) {
  return "#define BF16 " + std::to_string(t == DType::BF16 ? 1 : 0) + "\n#define HD " + std::to_string(g.head_dim) +
         "\n#define MASK " + std::to_string(attention_mask_code(g.mask)) + "\n#define SOFTCAP " + std::to_string(g.softcap > 0 ? 1 : 0) + "\n" +
         ksrc::kTensorCoreHelpers + ksrc::kMma16816;
}

void check_smem(const std::string& what, size_t smem, const std::string& tile, int64_t head_dim, const char* knob) {
  if (smem > device().smem_per_block_optin)
    throw Error(what + ": the attention tile " + tile + " needs " + std::to_string(smem) +
                " bytes of shared memory at head_dim " + std::to_string(head_dim) + ", the device allows " +
                std::to_string(device().smem_per_block_optin) + "; choose a smaller " + knob);
}

// Grid (x, y) = (query blocks, batch * heads).
void add_launch(LowerContext& cx, const std::string& what, CUfunction fn, int64_t q_blocks, int threads, size_t smem,
                const plan::AttentionGeom& g, const void* args, size_t args_size) {
  allow_dynamic_smem(fn, smem);
  auto launch = std::make_shared<KernelLaunch>(what, fn, static_cast<unsigned>(q_blocks), static_cast<unsigned>(threads),
                                               static_cast<unsigned>(smem), static_cast<unsigned>(g.batch * g.num_heads));
  launch->arg_bytes(args, args_size);
  cx.add([launch](cudaStream_t s) { launch->launch(s); });
}

// The wgmma kernel; false (nothing appended) when the sequence is too long for TMA coordinates
// or the driver has no tensor maps.
bool lower_wgmma(LowerContext& cx, const plan::Step& st, const plan::AttentionGeom& g, DType t, const void* pq,
                 const void* pk, const void* pv, void* po, const ResolvedKnobs& knobs) {
  // The scale is folded into the exp2, so it must keep the order of the scores (a softcap or a
  // bias converts them before the max instead).
  if (driver().tensor_map_encode_tiled == nullptr || !fits_int32(g.q_len) || !fits_int32(g.kv_len) ||
      !fits_int32(g.batch) || !fits_int32(g.num_heads) ||
      !(g.scale > 0 || g.softcap > 0 || g.mask == MaskKind::Bias))
    return false;
  const std::string what = step_label(st);
  const AttnWgmmaTile tile = wgmma_tile(g.head_dim, knobs);
  const size_t smem = attention_wgmma_smem(tile, g.head_dim);
  const std::string tile_name = std::to_string(tile.groups) + "," + std::to_string(tile.keys) + "," +
                                std::to_string(tile.stages) + "," + std::to_string(tile.blocks) + "," +
                                std::to_string(tile.pipelined ? 1 : 0);
  check_smem(what, smem, tile_name, g.head_dim, "RLX_CUDA_ATTN_WGMMA");
  // ptxas compiles the whole kernel within the launch share of registers: the accumulators of O
  // and of one score tile plus about 30 more must fit (the pipelined scores spill otherwise).
  const int need = static_cast<int>(g.head_dim) / 2 + tile.keys / 2 + 30;
  if (tile.launch_regs() < need)
    throw Error(what + ": the attention tile " + tile_name + " leaves " + std::to_string(tile.launch_regs()) +
                " registers per thread, head_dim " + std::to_string(g.head_dim) + " needs at least " +
                std::to_string(need) + "; choose fewer warpgroups, keys or blocks per SM in RLX_CUDA_ATTN_WGMMA");
  const int64_t q_blocks = (g.q_len + tile.rows() - 1) / tile.rows();
  AttnTmaArgs a{};
  a.q = tensor_map(what, t, pq, g.q, g.head_dim, g.q_len, g.num_heads, g.batch, tile.rows());
  a.k = tensor_map(what, t, pk, g.k, g.head_dim, g.kv_len, g.num_kv_heads, g.batch, tile.keys);
  a.v = tensor_map(what, t, pv, g.v, g.head_dim, g.kv_len, g.num_kv_heads, g.batch, tile.keys);
  set_common_args(a, g, po, q_blocks);
  const bool masked = g.mask == MaskKind::Custom || g.mask == MaskKind::Bias;
  a.mask = masked ? cx.ptr(st.in.at(3)) : nullptr;
  a.mask_batch = g.mask_batch_stride;
  for (int i = 0; i < 4; ++i) a.bias_s[i] = g.bias_strides[i];
  const std::string mask_type = storage_type(masked ? st.in.at(3).dtype : t);
  const std::string defs = defines(t, g) + "#define NWG " + std::to_string(tile.groups) + "\n#define BN " +
                           std::to_string(tile.keys) + "\n#define STAGES " + std::to_string(tile.stages) +
                           "\n#define MINB " + std::to_string(tile.blocks) + "\n#define PIPE " +
                           std::to_string(tile.pipelined ? 1 : 0) + "\n#define PREGS " +
                           std::to_string(tile.producer_regs()) + "\n#define CREGS " +
                           std::to_string(tile.consumer_regs()) + "\n" +
                           attention_wgmma_wrappers(t, tile.keys, static_cast<int>(g.head_dim));
  const CUfunction fn =
      get_kernel("attention_wgmma", kernel_source(ksrc::kAttentionWgmma, {{"T", storage_type(t)}, {"M", mask_type}}, defs),
                 "sm_90a");
  add_launch(cx, what + " (wgmma)", fn, q_blocks, tile.threads(), smem, g, &a, sizeof a);
  g_wgmma_steps.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace

bool lower_attention_mma(LowerContext& cx, const plan::Step& st) {
  const auto& g = std::get<plan::AttentionGeom>(st.geom);
  const plan::TensorRef& out = st.out.at(0);
  const DType t = out.dtype;
  if (st.in.size() < 3 || st.in[0].dtype != t || st.in[1].dtype != t || st.in[2].dtype != t) return false;
  const void* pq = cx.ptr(st.in[0]);
  const void* pk = cx.ptr(st.in[1]);
  const void* pv = cx.ptr(st.in[2]);
  void* po = cx.ptr(out);
  const DeviceInfo& dev = device();
  const ResolvedKnobs& knobs = cx.knobs();
  const bool wgmma = wgmma_rejection(g.head_dim, dev.cc_major, dev.cc_minor, knobs).empty();
  if (!mma_rejection(g, t, pq, pk, pv, po, wgmma, knobs).empty()) return false;
  if (wgmma && lower_wgmma(cx, st, g, t, pq, pk, pv, po, knobs)) {
    g_mma_steps.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  if (g.mask == MaskKind::Custom || g.mask == MaskKind::Bias) return false;  // the mma.sync kernel has no masks
  g_mma_steps.fetch_add(1, std::memory_order_relaxed);

  const std::string what = step_label(st);
  const AttnMmaTile tile = mma_tile(g.head_dim, knobs);
  const size_t smem = attention_mma_smem(tile, g.head_dim);
  check_smem(what, smem,
             std::to_string(tile.warps) + "," + std::to_string(tile.m_tiles) + "," + std::to_string(tile.keys),
             g.head_dim, "RLX_CUDA_ATTN_TILE");
  const int64_t q_blocks = (g.q_len + tile.rows() - 1) / tile.rows();
  AttnMmaArgs a{};
  a.q = pq, a.k = pk, a.v = pv;
  a.qs_b = g.q.batch, a.qs_s = g.q.seq, a.qs_h = g.q.head;
  a.ks_b = g.k.batch, a.ks_s = g.k.seq, a.ks_h = g.k.head;
  a.vs_b = g.v.batch, a.vs_s = g.v.seq, a.vs_h = g.v.head;
  set_common_args(a, g, po, q_blocks);
  const std::string defs = defines(t, g) + "#define NW " + std::to_string(tile.warps) + "\n#define MT " +
                           std::to_string(tile.m_tiles) + "\n#define BN " + std::to_string(tile.keys) +
                           "\n#define QREG " + std::to_string(tile.q_in_regs ? 1 : 0) + "\n";
  const CUfunction fn = get_kernel("attention_mma", kernel_source(ksrc::kAttentionMma, {{"T", storage_type(t)}}, defs));
  add_launch(cx, what + " (tensor cores)", fn, q_blocks, 32 * tile.warps, smem, g, &a, sizeof a);
  return true;
}

uint64_t attention_mma_steps() { return g_mma_steps.load(std::memory_order_relaxed); }
uint64_t attention_wgmma_steps() { return g_wgmma_steps.load(std::memory_order_relaxed); }

}  // namespace rlx::cuda
