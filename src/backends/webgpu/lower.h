#pragma once
// Lowering of Schedule steps to WebGPU work. Each step becomes dispatches of WGSL compute kernels
// (or buffer copies/fills) whose buffers, parameters and workgroup counts are fixed when the
// variant is prepared; the variant encodes them into one command buffer per run (WebGPU command
// buffers are single-use) in one compute pass, which orders the dispatches.
//
// The kernel convention (every template follows it; the shared elementwise printer too):
//   - every tensor is an array<u32> (one 32-bit word per element: codegen/lang_wgsl.cpp); each
//     distinct device buffer among a dispatch's operands is bound once, whole (WebGPU forbids a
//     written buffer in two bindings of one dispatch), in order of first use (Binds);
//   - then the error flag (atomic<i32>) when the kernel reports bad data;
//   - then one uniform: the element offset of every operand in its binding (o0, o1, ...), then
//     the kernel's own 32-bit parameters (a packed operand's offset counts 16-bit values);
//   - a 1-D grid is at most 65535 workgroups (groups_1d); kernels loop over their work.
#include <cstdint>
#include <string>
#include <vector>

#include "backends/webgpu/wgpu_context.h"
#include "backends/webgpu/wgpu_pipelines.h"
#include "plan/schedule.h"
#include "runtime/knobs.h"
#include "rlx/session.h"

namespace rlx::webgpu {

inline constexpr uint32_t kMaxGroups1d = 65535;

// An operand: a value's words in a device buffer.
struct Operand {
  abi::Buffer buffer = nullptr;
  uint64_t offset = 0;  // bytes from the buffer's start (a multiple of 4)
  uint64_t bytes = 0;
  bool write = false;
  // 16-bit values two per word (a packed f16/bf16 param: packed_weights.h); `offset` is then a
  // multiple of 2 and the kernel's uniform offset counts 16-bit values.
  bool packed = false;
  uint32_t elem() const;  // the first word's index (rlx::Error when it does not fit 32 bits)
  uint32_t half() const;  // packed: the first 16-bit value's index
};

// The bindings of one dispatch over `ops` (see the convention above).
struct Binds {
  std::vector<int> binding_of;     // per operand
  std::vector<BindingKind> kinds;  // per binding: the buffers, [the flag], the uniform
  bool error_flag = false;
  int flag_binding() const { return error_flag ? static_cast<int>(kinds.size()) - 2 : -1; }
  int uniform_binding() const { return static_cast<int>(kinds.size()) - 1; }
  // WGSL declarations: `rlx_b<i>` per buffer, `rlx_err` (the flag), and `rlx_p` (the uniform
  // struct RlxP {o0.., then `params`, each "name: u32|i32|f32"}).
  std::string decls(const std::vector<std::string>& params = {}) const;
  // Word `idx` of operand k: "rlx_b<b>[rlx_p.o<k> + (idx)]".
  std::string at(size_t k, const std::string& idx) const;
};
Binds plan_binds(const std::vector<Operand>& ops, bool error_flag);

struct Kernel {
  std::string name;
  std::string source;
  // The kernel unpacks its packed operands (their uniform offsets count 16-bit values); any
  // other kernel given a packed operand is an internal error at lowering, never a misread.
  bool unpacks = false;
};

class LowerContext {
 public:
  virtual ~LowerContext() = default;
  virtual const CompileOptions& options() const = 0;
  virtual const ResolvedKnobs& knobs() const = 0;
  virtual const DeviceInfo& info() const = 0;
  virtual Operand in(const plan::TensorRef& r) = 0;
  virtual Operand out(const plan::TensorRef& r) = 0;
  // Device scratch owned by the variant.
  virtual Operand scratch(size_t bytes, const std::string& what) = 0;
  // A read-only device buffer holding `words`, uploaded once at prepare (tables too large for
  // the uniform, e.g. a Pad's source indices).
  virtual Operand table(const std::vector<uint32_t>& words, const std::string& what) = 0;
  // Appends one dispatch of `k` with bindings plan_binds(ops, error_flag) and the uniform
  // {element offsets of ops..., params...}.
  virtual void dispatch(const Kernel& k, const std::vector<Operand>& ops, const std::vector<uint32_t>& params,
                        bool error_flag, uint32_t gx, uint32_t gy = 1, uint32_t gz = 1) = 0;
  // Appends a copy of `bytes` (a multiple of 4) from src to dst (regions must not overlap).
  virtual void copy(const Operand& dst, const Operand& src, uint64_t bytes) = 0;
  // Appends a fill of dst with the 32-bit word `word`.
  virtual void fill(const Operand& dst, uint64_t bytes, uint32_t word) = 0;
  // The RmsNorm / FusedSwiGLU step a GEMV computes in its prologue (plan::plan_gemv_prologues;
  // that step is not lowered on its own), or null.
  virtual const plan::Step* absorbed_producer(const plan::Step& consumer) const {
    (void)consumer;
    return nullptr;
  }

  uint32_t groups_1d(uint64_t items, uint64_t per_group) const;
};

void lower_step(LowerContext& cx, const plan::Step& st);
void lower_elementwise(LowerContext& cx, const plan::Step& st);  // lower_elementwise.cpp
void lower_copy(LowerContext& cx, const plan::Step& st);         // lower_copy.cpp
void lower_matmul(LowerContext& cx, const plan::Step& st);       // lower_matmul.cpp
// Rows of `st` the GEMV kernel takes with an absorbed A producer (plan::GemvRowsFn), else 0.
int64_t gemv_prologue_rows(const plan::Step& st);
void lower_rows(LowerContext& cx, const plan::Step& st);         // lower_rows.cpp
void lower_rope(LowerContext& cx, const plan::Step& st);         // lower_rope.cpp
// Two consecutive RoPE steps over the same tables (a decode's q and k) as one dispatch, when
// neither writes what the other reads; false (nothing lowered) otherwise.
bool lower_rope_pair(LowerContext& cx, const plan::Step& first, const plan::Step& second);
void lower_attention(LowerContext& cx, const plan::Step& st);    // lower_attention.cpp
void lower_spatial(LowerContext& cx, const plan::Step& st);      // lower_spatial.cpp
void lower_select(LowerContext& cx, const plan::Step& st);       // lower_select.cpp (ArgMax/ArgMin, TopK, Sample)
void lower_scan(LowerContext& cx, const plan::Step& st);         // lower_scan.cpp (Cumsum)
void lower_scatter(LowerContext& cx, const plan::Step& st);      // lower_scatter.cpp (ScatterAdd, CacheWrite)
void lower_random(LowerContext& cx, const plan::Step& st);       // lower_random.cpp (RngUniform)

// Appends one generated elementwise kernel: out = chain(ins) over `geom`.
void add_elementwise(LowerContext& cx, const std::vector<RegionStep>& steps, const std::vector<DType>& in_dtypes,
                     DType out_dtype, const plan::ElementwiseGeom& geom, const Operand& out,
                     const std::vector<Operand>& ins, const std::string& what);

std::string step_label(const plan::Step& st);

// What the WebGPU backend runs as is (claims.cpp); `info` null: a device with every optional feature.
bool webgpu_claims_kind(std::string_view op_name);
bool webgpu_claims_node(const Graph& g, const Node& n, const DeviceInfo* info, std::string* why = nullptr);

struct FamilyClaims {
  bool (*kind)(std::string_view op_name);
  bool (*node)(const Graph& g, const Node& n, const DeviceInfo* info, std::string* why);
};
extern const FamilyClaims kElementwiseClaims;
extern const FamilyClaims kCopyClaims;
extern const FamilyClaims kMatmulClaims;
extern const FamilyClaims kRowsClaims;
extern const FamilyClaims kRopeClaims;
extern const FamilyClaims kAttentionClaims;
extern const FamilyClaims kSpatialClaims;
extern const FamilyClaims kSelectClaims;
extern const FamilyClaims kScanClaims;
extern const FamilyClaims kScatterClaims;
extern const FamilyClaims kRandomClaims;
bool refuse(std::string* why, const std::string& msg);

}  // namespace rlx::webgpu
