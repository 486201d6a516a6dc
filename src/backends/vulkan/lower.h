#pragma once
// Lowering of Schedule steps to Vulkan work. Each step becomes dispatches of GLSL compute kernels
// (or buffer copies/fills) whose buffers, push constants and workgroup counts are fixed when the
// variant is prepared; the variant records them once into a command buffer, with a barrier only
// where a command touches bytes that an earlier command since the last barrier wrote (or writes
// bytes an earlier one read), and re-submits it every run.
//
// The kernel convention (every template follows it):
//   - set 0, bindings 0.. in the order of the `Operand`s given to dispatch(); each a std430
//     buffer of one storage type (glsl_buffer below); a binding is a window of a device buffer
//     starting at an aligned offset at or below the operand;
//   - push constants: first one `uint` element offset per binding (Operand::elem, in elements
//     of the binding's type), then the kernel's own parameters (uint/int/float words);
//   - sizes that change the kernel's structure are baked into the source; a 1-D grid is at most
//     info().max_groups[0] workgroups (groups_1d), so kernels loop over their work (grid-stride);
//   - errors on bad data: atomicMax(code) on the error_flag() operand (codes in kernel_error.h).
#include <cstdint>
#include <string>
#include <vector>

#include "backends/vulkan/vk_context.h"
#include "plan/absorb_plans.h"
#include "plan/schedule.h"
#include "runtime/knobs.h"
#include "rlx/session.h"

namespace rlx::vulkan {

inline constexpr uint32_t kMaxGroups1d = 65535;

// A window of a device buffer bound to one binding, and where the operand starts in it.
struct Operand {
  VkBuffer buffer = VK_NULL_HANDLE;
  uint64_t offset = 0;  // of the window in the buffer (a multiple of the storage alignment)
  uint64_t range = 0;   // bytes of the window
  uint64_t skip = 0;    // bytes from the window's start to the operand
  uint64_t bytes = 0;   // the operand's bytes
  bool write = false;   // the kernel writes it (for barriers)
  // The operand's first element in the window, in elements of `elem_bytes` (rlx::Error when the
  // operand does not start on such an element or the index does not fit 32 bits).
  uint32_t elem(size_t elem_bytes) const;
};

// A GLSL compute shader; `name` labels errors and profiles.
struct Kernel {
  std::string name;
  std::string source;
};

class LowerContext {
 public:
  virtual ~LowerContext() = default;
  virtual const CompileOptions& options() const = 0;
  virtual const ResolvedKnobs& knobs() const = 0;
  virtual const DeviceInfo& info() const = 0;
  // Operand `r` as a kernel input or output (a window over its storage bytes).
  virtual Operand in(const plan::TensorRef& r) = 0;
  virtual Operand out(const plan::TensorRef& r) = 0;
  // Device scratch owned by the variant (read and written by kernels).
  virtual Operand scratch(size_t bytes, const std::string& what) = 0;
  // A read-only buffer holding `words`, uploaded once when the variant is prepared (index
  // tables too large for push constants, e.g. per-axis strides or a Pad's source table).
  virtual Operand table(const std::vector<uint32_t>& words, const std::string& what) = 0;
  // The run's error flag (one int, 0 at the start of each run).
  virtual Operand error_flag() = 0;
  // The producer step `consumer` computes itself, or null: an RmsNorm or FusedSwiGLU absorbed by
  // a vector GEMV (plan_gemv_prologues; the GEMV runs it first where it cannot), or the first Rope
  // of a pair (plan_rope_pairs; one dispatch for both).
  virtual const plan::Step* absorbed_producer(const plan::Step& consumer) const {
    (void)consumer;
    return nullptr;
  }
  // What a CacheWrite's dispatch also does (knob vulkan_cache_write_fusion): `first`, an earlier
  // CacheWrite of the same positions written by the same dispatch (plan_cache_write_pairs), and
  // the Rope steps whose results are the rows of the step (`rope`) and of `first` (`first_rope`;
  // plan_cache_write_ropes): their inputs are read and rotated as they are written; `q_rope`, the
  // other rope of their RoPE pair (plan_cache_write_q_ropes), rotated in the same dispatch.
  struct CacheWriteFusion {
    const plan::Step* first = nullptr;
    const plan::Step* rope = nullptr;
    const plan::Step* first_rope = nullptr;
    const plan::Step* q_rope = nullptr;
  };
  virtual CacheWriteFusion cache_write_fusion(const plan::Step& write) const {
    (void)write;
    return {};
  }
  // The operands `attention` reads in place from a Narrow's source (plan_attention_narrows; the
  // Narrow steps are not lowered), or none.
  virtual std::vector<plan::AttentionNarrow> attention_narrows(const plan::Step& attention) const {
    (void)attention;
    return {};
  }
  // The Concat steps `attention` reads in place (plan_attention_concats with
  // decode_attention_limits(): the decode kernel reads a KV cache and its new rows as two parts;
  // the lowering runs them first where it takes another kernel), or none.
  virtual std::vector<const plan::Step*> attention_concats(const plan::Step& attention) const {
    (void)attention;
    return {};
  }
  // Appends one dispatch of `k` over (gx, gy, gz) workgroups.
  virtual void dispatch(const Kernel& k, const std::vector<Operand>& bindings, const std::vector<uint32_t>& push,
                        uint32_t gx, uint32_t gy = 1, uint32_t gz = 1) = 0;
  // Appends a copy of `bytes` from src's operand to dst's (regions must not overlap).
  virtual void copy(const Operand& dst, const Operand& src, uint64_t bytes) = 0;
  // Appends a fill of dst's operand with the 32-bit word `word` (bytes a multiple of 4, the
  // operand 4-byte aligned).
  virtual void fill(const Operand& dst, uint64_t bytes, uint32_t word) = 0;

  // Workgroups of a grid-stride 1-D dispatch over `items` with `per_group` items per workgroup
  // (at most kMaxGroups1d).
  uint32_t groups_1d(uint64_t items, uint64_t per_group) const;
};

// Appends the work of one step; rlx::Error naming the node for anything unsupported.
void lower_step(LowerContext& cx, const plan::Step& st);

// Per family (one file each).
void lower_elementwise(LowerContext& cx, const plan::Step& st);   // lower_elementwise.cpp
void lower_copy(LowerContext& cx, const plan::Step& st);          // lower_copy.cpp: Copy family
void lower_rope(LowerContext& cx, const plan::Step& st);          // lower_rope.cpp
void lower_matmul(LowerContext& cx, const plan::Step& st);        // lower_matmul.cpp
// Rows of a matmul step the vector GEMV could take with an absorbed prologue, or 0 (the
// GemvRowsFn of plan_gemv_prologues; the operands' alignment is checked when it is lowered).
int64_t gemv_prologue_rows(const plan::Step& st);                  // lower_matmul.cpp
void lower_dequant(LowerContext& cx, const plan::Step& st);       // lower_dequant.cpp: DequantMatMul
void lower_rows(LowerContext& cx, const plan::Step& st);          // lower_rows.cpp
void lower_attention(LowerContext& cx, const plan::Step& st);     // lower_attention.cpp
// The steps the decode attention kernel takes (query rows per KV head), for plan_attention_concats.
plan::DecodeAttentionLimits decode_attention_limits();
// Families owned by their files; each returns false for an op it does not own.
bool lower_select_family(LowerContext& cx, const plan::Step& st);  // lower_select.cpp
bool lower_spatial_family(LowerContext& cx, const plan::Step& st); // lower_spatial.cpp

// Appends one generated elementwise kernel: out = chain(ins) over `geom` (matmul epilogues use it).
void add_elementwise(LowerContext& cx, const std::vector<RegionStep>& steps, const std::vector<DType>& in_dtypes,
                     DType out_dtype, const plan::ElementwiseGeom& geom, const Operand& out,
                     const std::vector<Operand>& ins, const std::string& what);

// ---- GLSL helpers for kernel templates ----
// "#version 450" and the extensions to hold and compute `dtypes` (plus subgroup extensions
// when `subgroups`).
std::string glsl_header(const std::vector<DType>& dtypes, bool subgroups = false);
// `layout(std430, set = 0, binding = b) [readonly] [coherent] buffer B<b> { T data[]; } name;` for
// logical dtype t (coherent: written and read by different workgroups of one dispatch).
std::string glsl_buffer(int binding, const std::string& name, DType t, bool readonly, bool coherent = false);
// Storage element -> compute value (float for f16/bf16/f32, double for f64, the integer type
// otherwise; bool as bool), and back; helpers they need are in glsl_dtype_helpers(t).
std::string glsl_load(DType t, const std::string& raw);
std::string glsl_store(DType t, const std::string& v);
std::string glsl_compute_type(DType t);
std::string glsl_dtype_helpers(const std::vector<DType>& dtypes);
// The first line of a cooperative-matrix kernel (its GLSL written against GL_NV_cooperative_matrix;
// spirv_coopmat.h): bf16 kernels ask for the KHR rewrite with bf16 operands, f16 ones for the KHR
// rewrite where the device lists KHR f16 matrices and knob vulkan_coopmat_khr is on; else "" (NV).
std::string coopmat_directive(const LowerContext& cx, bool bf16);

// Node label for messages: "node 12 (matmul)".
std::string step_label(const plan::Step& st);

// What the Vulkan backend runs as is; `why` says what is missing otherwise (claims.cpp). `info`
// null: a device with every optional feature (`rlx check` without a device).
bool vulkan_claims_kind(std::string_view op_name);
bool vulkan_claims_node(const Graph& g, const Node& n, const DeviceInfo* info, std::string* why = nullptr);

// The claims of one family, defined in its lowering file: the op kinds it lowers, and whether
// it runs node `n` as is (dtypes and attributes; every dtype is already known to be held on the
// device). claims.cpp asks every family.
struct FamilyClaims {
  bool (*kind)(std::string_view op_name);
  bool (*node)(const Graph& g, const Node& n, const DeviceInfo* info, std::string* why);
};
extern const FamilyClaims kElementwiseClaims, kCopyClaims, kRopeClaims, kMatmulClaims, kDequantClaims, kRowsClaims,
    kAttentionClaims, kSelectClaims, kSpatialClaims;
// Sets *why (when given) and returns false.
bool refuse(std::string* why, const std::string& msg);

}  // namespace rlx::vulkan
