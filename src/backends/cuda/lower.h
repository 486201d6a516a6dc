#pragma once
// Lowering of Schedule steps to CUDA work: each step becomes one or more `Op`s (kernel launches
// or cuBLASLt calls) whose pointers and parameters are all fixed when the variant is prepared,
// so a run only issues them (or replays their captured CUDA graph).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/device.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/status.h"
#include "plan/absorb_plans.h"
#include "plan/gemv_groups.h"
#include "plan/schedule.h"
#include "runtime/knobs.h"
#include "rlx/session.h"

namespace rlx::cuda {

using DeviceOp = std::function<void(cudaStream_t)>;

class LowerContext {
 public:
  virtual ~LowerContext() = default;
  virtual uint8_t* ptr(const plan::TensorRef& r) = 0;  // device address of an operand/result
  virtual const CompileOptions& options() const = 0;
  // The compile's tuning knobs, resolved once (runtime/knobs.h).
  virtual const ResolvedKnobs& knobs() const = 0;
  virtual void add(DeviceOp op) = 0;
  virtual size_t op_count() const = 0;  // ops added so far
  // Device scratch owned by the variant (e.g. attention split partials).
  virtual uint8_t* scratch(size_t bytes, const std::string& what) = 0;
  // Scratch zeroed now (e.g. the split-K tickets that kernels reset after each use).
  uint8_t* zeroed_scratch(size_t bytes, const std::string& what) {
    uint8_t* p = scratch(bytes, what);
    RLX_CUDA_CHECK(cudaMemset(p, 0, bytes));
    RLX_CUDA_CHECK(cudaDeviceSynchronize());
    return p;
  }
  // Scratch of at least `bytes` shared by the steps that use it one after another on the stream
  // (DequantMatMul's decoded weight chunks): a larger request allocates a larger one.
  uint8_t* shared_scratch(size_t bytes, const std::string& what) {
    if (bytes > shared_scratch_bytes_) shared_scratch_ = scratch(bytes, what), shared_scratch_bytes_ = bytes;
    return shared_scratch_;
  }
  virtual GemmPlan& gemm(const GemmProblem& p, const std::string& what) = 0;
  virtual void* gemm_workspace() = 0;
  virtual size_t gemm_workspace_bytes() const = 0;
  virtual int* error_flag() = 0;  // kernels report bad data here (checked after each run)
  // x quantized to 8-bit blocks by the integer-dot DequantMatMul (lower_dequant.cpp), by the value
  // it holds: later readers of the same value at the same address (q/k/v, gate/up projections)
  // reuse the copy, since a value does not change while it lives.
  struct QuantizedX {
    Value value;
    const uint8_t* x = nullptr;
    int64_t elems = 0;
    uint8_t* xs = nullptr;
  };
  std::vector<QuantizedX> quantized_x;
  // The weight region `w` (row-major [k, n]) of a param or constant, kept transposed on the
  // device as [n, ldk] (ldk >= k, the padding zero), or with `tiles` in the tensor-core GEMV's
  // 16 x 16 tiles ([n rounded up to 16, ldk], ldk a multiple of 16; kernels/gemv_packed.h), and
  // rewritten after every upload of the param; null when `w` is not a param or constant (the
  // caller reads it as stored). A leaf whose every reader takes it packed is not kept as stored
  // on the device.
  virtual uint8_t* packed_weight(const plan::TensorRef& w, int64_t k, int64_t n, int64_t ldk, bool tiles,
                                 const std::string& what) {
    (void)w, (void)k, (void)n, (void)ldk, (void)tiles, (void)what;
    return nullptr;
  }
  // The steps whose work `consumer` absorbs (see plan_gemv_prologues, plan_attention_concats).
  virtual std::vector<const plan::Step*> absorbed_producers(const plan::Step& consumer) const {
    (void)consumer;
    return {};
  }
  // The group whose launch is `last` (plan::plan_dequant_gemv_groups, knob cuda_dequant_groups),
  // null when it leads none; its steps are the schedule's.
  struct DequantGroup {
    std::vector<const plan::Step*> members;
    const plan::Step* norm = nullptr;
    const plan::Step* residual_add = nullptr;
    const plan::Step* swiglu = nullptr;
    size_t gate = 0;
  };
  virtual const DequantGroup* dequant_group(const plan::Step& last) const {
    (void)last;
    return nullptr;
  }
  // Bytes of the graph's params and constants (its weights).
  virtual size_t weight_bytes() const { return 0; }
  // The first of them, or null.
  const plan::Step* absorbed_producer(const plan::Step& consumer) const {
    const auto ps = absorbed_producers(consumer);
    return ps.empty() ? nullptr : ps.front();
  }
  // The packed GEMVs' weights in launch order, as lowering goes (lower_gemv_packed): each GEMV
  // prefetches the first part of the next one's weight into L2 (most of it after other work, a
  // decode attention, which leaves DRAM idle), so it is told that weight when the next is lowered.
  struct WeightStream {
    size_t ops_after_gemv = SIZE_MAX;  // op_count() just after the last packed GEMV was added
    std::function<void(const uint8_t* w, size_t bytes)> tell_next;  // set while a GEMV waits
    // Set while the last op added is a packed GEMV: makes it let the next kernel launch before
    // its own wait (for a kernel with loads before its wait that no GEMV block would share).
    std::function<void()> launch_next_early;
  };
  WeightStream& weight_stream() { return weight_stream_; }

 private:
  WeightStream weight_stream_;
  uint8_t* shared_scratch_ = nullptr;
  size_t shared_scratch_bytes_ = 0;
};

// Appends the work of one step; throws rlx::Error naming the node for anything unsupported.
void lower_step(LowerContext& cx, const plan::Step& st);

// Per family (lower_matmul.cpp, lower_elementwise.cpp, lower_rows.cpp, lower_shape.cpp,
// lower_attention.cpp).
void lower_matmul(LowerContext& cx, const plan::Step& st);
void lower_elementwise(LowerContext& cx, const plan::Step& st);
void lower_rows(LowerContext& cx, const plan::Step& st);
void lower_shape(LowerContext& cx, const plan::Step& st);
void lower_attention(LowerContext& cx, const plan::Step& st);

// Op families kept in their own files, each with its own claim rules: `claims_kind_*` says
// whether the family owns the op kind, `claims_node_*` checks one node of it (dtypes, attributes)
// and `lower_*_family` lowers a step of it, returning false for a step that is not the family's.
//   select_ops.cpp: ArgMax/ArgMin/TopK/Sample, Cumsum, ScatterAdd, RngUniform/RngNormal, GroupedMatMul
//   conv_ops.cpp:   Conv/ConvTranspose/Pool through cuDNN
bool claims_kind_select(std::string_view op_name);
bool claims_node_select(const Graph& g, const Node& n, std::string* why);
bool lower_select_family(LowerContext& cx, const plan::Step& st);
// lower_dequant.cpp: DequantMatMul (GGUF block weights decoded in registers).
bool claims_node_dequant(const Graph& g, const Node& n, std::string* why);
void lower_dequant_matmul(LowerContext& cx, const plan::Step& st);
// What a decode launch of DequantMatMul computes beyond its products (kernels/dequant.h,
// kDequantParts): x's RmsNorm in its prologue, silu(gate) * up of two products.
struct DequantFusion {
  bool norm = false;
  bool swiglu = false;
};
// kernels/dequant.h for `rows` rows per chunk; `xvec`: x read as 16-byte vectors.
std::string dequant_gemv_source(QuantFormat f, DType t, int64_t rows, bool xvec, DequantFusion fu = {});
// The integer-dot decode path (kernels/dequant_dp4a.h): x (with `norm`: its RmsNorm) to 8-bit
// blocks, then the GEMV of `rows` rows.
std::string quantize_x_q8_source(DType t, bool norm = false);
std::string dequant_gemv_dp4a_source(QuantFormat f, DType t, int64_t rows, bool swiglu = false);
// The prefill path: weight rows decoded to a dense buffer of `out` (f32, f16 or bf16: x's dtype;
// kernels/dequant.h, dequant_rows).
std::string dequant_rows_source(QuantFormat f, DType out);
// Decode of the f16 / bf16 weight formats (kernels/dequant.h, dequant_gemv_half), `rows` <= 8.
std::string dequant_gemv_half_source(QuantFormat f, DType t, int64_t rows, bool xvec, DequantFusion fu = {});
// The groups' limits for plan::plan_dequant_gemv_groups: the decode kernels' rows, and an
// RmsNorm prologue whose rows fit the 48 KB of shared memory the non-dp4a kernels stage them in.
inline constexpr plan::GemvGroupLimits kDequantGroupLimits{8, 3, 12 * 1024};
// Decode launches of DequantMatMul lowered in this process that run several products, or an
// absorbed RmsNorm, residual add or SwiGLU (for tests): totals per kind.
struct DequantGroupStats {
  uint64_t launches = 0, products = 0, norms = 0, residuals = 0, swiglus = 0;
};
DequantGroupStats dequant_group_stats();
bool claims_kind_conv(std::string_view op_name);
bool claims_node_conv(const Graph& g, const Node& n, std::string* why);
bool lower_conv_family(LowerContext& cx, const plan::Step& st);

// Appends one generated elementwise kernel: out = chain(ins) over `geom` (out may be ins[0]:
// every thread reads its elements before writing them). Matmul epilogues use it too.
void add_elementwise(LowerContext& cx, const std::vector<RegionStep>& steps, const std::vector<DType>& in_dtypes,
                     DType out_dtype, const plan::ElementwiseGeom& geom, uint8_t* out,
                     const std::vector<const uint8_t*>& ins, const std::string& what);

// Source of the skinny-GEMM kernel (kernels/gemv.h) for one configuration: `rows` <= 4,
// `bias` 0 = none, 1 = scalar, 2 = per column; the activation and residual of the epilogue;
// `prologue` 0 = A as stored, 1 = RmsNorm (with beta when `has_beta`), 2 = FusedSwiGLU.
// Throws rlx::Error for lanes_per_row outside {1, 2, 4, 8, 16, 32}.
struct GemvConfig {
  DType t = DType::F32, bias_t = DType::F32;
  int64_t rows = 1;
  int bias = 0;
  std::optional<ActKind> act;
  bool residual = false;
  int prologue = 0;
  bool has_beta = false, gate_first = false;
  int64_t lanes_per_row = 8;  // lanes per W row (a power of two <= 32): TILE = lanes * 16 bytes
  bool l2_prefetch = false;   // prefetch the block's later W rows into L2 before waiting
  bool w_static = false;      // W is a leaf (no kernel writes it): loaded before waiting
  bool stage_rows = false;    // the RmsNorm prologue keeps A's rows in shared memory
  bool gain_static = false;   // the RmsNorm gain/bias are leaves (packed kernel: staged before waiting)
  bool vec_a = false;         // packed kernel: K a multiple of 16 bytes and A's source 16-byte aligned
  bool evict_first = true;    // W loaded with the L2 evict-first policy (see gemv_evict_first)
  bool tensor_cores = false;  // packed kernel, f16 / bf16: mma over a tile-packed W (kernels/gemv_packed.h)
};
std::string gemv_source(const GemvConfig& c);
// Source of the packed-weight GEMV (kernels/gemv_packed.h) for `c` (lanes_per_row, l2_prefetch,
// w_static and stage_rows do not apply) with `warps` (1 to 32) warps per block, `wpr` of them per
// row (a power of two dividing `warps`; with tensor_cores, any divisor leaving at most 15 groups
// when it is above 1, and c.t f16 or bf16); rlx::Error otherwise.
std::string gemv_packed_source(const GemvConfig& c, int64_t warps, int64_t wpr);
// Packed GEMV launches lowered in this process that read A in 16-byte words (for tests).
uint64_t gemv_vec_a_launches();
// Packed GEMV launches lowered in this process on the tensor cores (for tests).
uint64_t gemv_tensor_core_launches();
// Whether GEMV weights are loaded with the L2 evict-first policy: `knob` 0 or 1 forces it
// (RLX_GEMV_EVICT_FIRST), -1 (unset) chooses it when the graph's weights do not fit in the L2, so
// that a model whose weights do stays resident there from one run to the next.
bool gemv_evict_first(int64_t knob, size_t weight_bytes, size_t l2_bytes);
// GEMV launches compiled with the evict-first policy (for tests).
uint64_t gemv_evict_first_launches();
// Bytes of the next packed GEMV's weight that a packed GEMV prefetches into L2 (see
// LowerContext::WeightStream), `after_other` other work or right after another GEMV: `knob_mb`
// (RLX_GEMV_PREFETCH_MB, RLX_GEMV_PREFETCH_CHAINED_MB) >= 0 gives MB, 0 off; -1 (unset) the
// default, 70% of the L2 (`l2_bytes`) after other work and an eighth of it after a GEMV. Only
// with evict-first weights (a model whose weights fit in the L2 keeps them there) and on sm_90+.
size_t gemv_prefetch_budget(bool after_other, int64_t knob_mb, size_t l2_bytes);
// Packed GEMV launches lowered in this process that prefetch the next one's weight (for tests).
uint64_t gemv_weight_prefetches();
// Elementwise launches lowered in this process that run early and let their dependents launch
// before their own wait (grids of at most 4 blocks; RLX_CUDA_TINY_EARLY=0: none), for tests.
uint64_t elementwise_early_launches();
// Source of the kernel that packs a weight for it, for elements of `elem_bytes` bytes: rows of
// Wt, or (`tiles`, 2-byte elements) the tensor-core kernel's 16 x 16 tiles.
std::string gemv_pack_source(size_t elem_bytes, bool tiles);

// TO_A(x) / FROM_A(v): the conversions between the storage type T and the accumulator A that the
// row, reduce and scan sources use: through f32 (to_f / from_f<T>, for an f32 accumulator of any
// float storage), else plain casts (A double or a 64-bit integer).
std::string acc_conversion_defines(bool through_f32);
// The row kernels' source (kernels/rows.h) for rows of dtype t: f64 computes in double.
std::string rows_source(DType t);
// Source of the reduce kernels (kernels/rows.h: kReduce) for input / output dtype t: any float
// dtype, or an integer / bool one (64-bit accumulation, as the CPU).
std::string reduce_source(DType t);
// The Cumsum kernels' source (kernels/scan.h) with dtype t's accumulator.
std::string scan_source(DType t);

// What the CUDA kernels take, for the shared absorption plans (plan/absorb_plans.h):
// attn_decode (kernels/attention.h) takes at most 8 query rows per KV head, and rotates at most
// 8 new K rows (into registers, then shared memory) when it absorbs their RoPE.
inline constexpr plan::DecodeAttentionLimits kDecodeAttentionLimits{8, 8};
// Rows of a skinny product (plan::skinny_rows) that the GEMV kernels take (lower_matmul.cpp):
// at most 4, against a 16-byte aligned weight, f32/f16/bf16 operands of one dtype; 0 otherwise.
int64_t gemv_rows(const plan::Step& st, Precision precision);

// The shared absorption plans with the CUDA kernels' limits (variant.cpp and the tests call
// these; see plan/absorb_plans.h for what each plans).
inline std::map<size_t, size_t> plan_gemv_prologues(const plan::Schedule& s, Precision precision) {
  return plan::plan_gemv_prologues(s, [precision](const plan::Step& st) { return gemv_rows(st, precision); });
}
inline std::map<size_t, std::vector<size_t>> plan_attention_concats(const plan::Schedule& s) {
  return plan::plan_attention_concats(s, kDecodeAttentionLimits);
}
inline std::map<size_t, std::vector<size_t>> plan_attention_ropes(const plan::Schedule& s,
                                                                 const std::map<size_t, std::vector<size_t>>& concats) {
  return plan::plan_attention_ropes(s, concats, kDecodeAttentionLimits);
}
using plan::plan_rope_pairs;

// Concats read in place by attention decode launches in this process (for tests).
uint64_t attention_concat_reads();
// RoPEs rotated on load by attention decode launches in this process (for tests).
uint64_t attention_rope_reads();
// Decode attention launches whose key splits merge in a thread-block cluster, and those that copy
// their cached K/V rows into shared memory before the wait, lowered in this process (for tests).
uint64_t attention_cluster_merges();
uint64_t attention_kv_smem_copies();
// Decode attention launches on the tensor cores (attn_decode_tc: one block per KV head, the
// keys in shared memory), lowered in this process (for tests).
uint64_t attention_tc_decodes();

// The attention kernels' mask numbering: 0 none, 1 causal, 2 sliding window, 3 custom keep
// mask, 4 additive bias, 5 positions (only the generic `attention` kernel, compiled with POS_MASK).
inline int attention_mask_code(MaskKind m) {
  switch (m) {
    case MaskKind::None: return 0;
    case MaskKind::Causal: return 1;
    case MaskKind::SlidingWindow: return 2;
    case MaskKind::Custom: return 3;
    case MaskKind::Bias: return 4;
    case MaskKind::Positions: return 5;
  }
  return 0;
}

// Node label for messages: "node 12 (matmul)".
std::string step_label(const plan::Step& st);

// True when the CUDA backend runs node `n` of `g` as is; `why` says what is missing otherwise.
bool cuda_claims_node(const Graph& g, const Node& n, std::string* why = nullptr);
bool cuda_claims_kind(std::string_view op_name);

}  // namespace rlx::cuda
