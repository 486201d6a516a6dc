#pragma once
// Tuning knobs: the switches that change how a graph is lowered (kernel choices, tile shapes,
// fusion thresholds) without changing what it computes.
//
// Every knob has a name (its environment variable, lower case, without "RLX_": "gemv_packed"
// is RLX_GEMV_PACKED), a type (bool / int / string), a range for ints, a default and a scope:
//   - compile: read when a graph is optimized and lowered. Each has a member of
//     `CompileOptions::tuning` below (pass_report and disable_passes are the older
//     `CompileOptions::pass_report` / `disabled_passes`). Resolution, per compile: the member
//     when set, else the environment variable when set and non-empty, else the default. A
//     malformed or out-of-range value (member or variable) is an rlx::Error naming it and
//     its range; it is never ignored.
//   - process: settings of the process (device index, kernel cache folder, cuDNN library,
//     profiling), read from the environment only.
// The table (variables, ranges, defaults, one line of documentation each) is `knob_table()`;
// `rlx knobs` prints it and docs/development.md ("Tuning knobs") holds the same text.
// "auto" defaults are chosen by the lowering from the device and the shape; an unset member
// or variable (or the value "auto") keeps that choice.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rlx {

struct CompileOptions;

// The compile-scope knobs that are members of Tuning, as X-macro rows
// BOOL(name) / INT(name) (a fixed default) / AUTO(name) (an int whose default the lowering
// chooses) / STRING(name). Ranges, defaults and docs: knob_table() (src/runtime/knobs.cpp).
#define RLX_TUNING_KNOBS(BOOL, INT, AUTO, STRING)                                                   \
  /* optimizer */                                                                                 \
  INT(fuse_attn_threshold)                                                                        \
  /* CPU */                                                                                       \
  BOOL(cpu_pack_quant)                                                                            \
  /* CUDA: decode GEMVs */                                                                        \
  INT(gemv_blocks_per_sm) AUTO(gemv_evict_first) BOOL(gemv_packed) BOOL(gemv_tc)                  \
  AUTO(gemv_packed_warps) AUTO(gemv_tc_split) BOOL(gemv_vec_a) AUTO(gemv_carveout)                \
  AUTO(gemv_prefetch_mb) AUTO(gemv_prefetch_chained_mb) AUTO(gemv_lpr) BOOL(gemv_l2pf)            \
  BOOL(cuda_gemv_prologue) BOOL(cuda_dequant_dp4a) BOOL(cuda_dequant_groups)                     \
  INT(cuda_dequant_gemm_rows)                                                                     \
  /* CUDA: attention */                                                                           \
  INT(cuda_attn_decode_keys) INT(cuda_attn_cluster) BOOL(cuda_attn_smkv) BOOL(cuda_attn_decode_tc) \
  BOOL(cuda_attn_decode_early) INT(cuda_attn_decode_tc_warps) AUTO(cuda_attn_decode_tc_keys)      \
  BOOL(cuda_attn_mma) STRING(cuda_attn_tile) STRING(cuda_attn_wgmma) BOOL(cuda_attn_concat)       \
  BOOL(cuda_attn_rope) BOOL(cuda_rope_pairs) BOOL(cuda_cache_write_pairs) BOOL(cuda_cache_write_rope) \
  /* CUDA: elementwise kernels and launches */                                                    \
  BOOL(cuda_tiny_early) BOOL(cuda_graphs)                                                         \
  /* Vulkan */                                                                                    \
  BOOL(vulkan_coopmat) BOOL(vulkan_coopmat_khr) STRING(vulkan_gemm_tile) BOOL(vulkan_gemm_splitk)  \
  BOOL(vulkan_gemv_prologue) BOOL(vulkan_rope_pairs) BOOL(vulkan_cache_write_fusion)               \
  /* WebGPU */                                                                                    \
  STRING(webgpu_limits) AUTO(webgpu_attn_baked) AUTO(webgpu_packed_weights) BOOL(webgpu_gemv_prologue)

// Per-compile overrides of the compile-scope knobs (`CompileOptions::tuning`): an unset member
// leaves the knob to its environment variable, then to its default. Set members directly
// (`options.tuning.gemv_packed = false;`) or by name with set_knob().
struct Tuning {
#define RLX_TUNING_BOOL(name) std::optional<bool> name;
#define RLX_TUNING_INT(name) std::optional<int64_t> name;
#define RLX_TUNING_STRING(name) std::optional<std::string> name;
  RLX_TUNING_KNOBS(RLX_TUNING_BOOL, RLX_TUNING_INT, RLX_TUNING_INT, RLX_TUNING_STRING)
#undef RLX_TUNING_BOOL
#undef RLX_TUNING_INT
#undef RLX_TUNING_STRING
};

enum class KnobType { Bool, Int, String };
enum class KnobScope { Compile, Process };

// One row of the knob table.
struct KnobInfo {
  const char* name;  // "gemv_packed"
  const char* env;   // "RLX_GEMV_PACKED"
  KnobType type;
  KnobScope scope;
  int64_t lo, hi;            // Int: the accepted range (inclusive); Bool: 0, 1
  bool auto_default;         // the default is chosen by the code ("auto")
  const char* default_text;  // "4", "on", "auto", "" (string knobs: unset)
  const char* choices;       // String: the accepted values separated by '|', or "" for any text
  const char* field;         // the CompileOptions member ("tuning.gemv_packed"), "" for process knobs
  const char* doc;           // one line
};

// Every knob, compile scope first, in a fixed order.
const std::vector<KnobInfo>& knob_table();
// The row of `name` (a knob name or its environment variable), or null.
const KnobInfo* find_knob(std::string_view name);

// Sets the compile-scope knob `name` (or its environment variable's name) of `options` from
// text, as the environment would: bools take 1/0, true/false, on/off, yes/no; ints a decimal
// integer in range (or "auto" for an auto knob: the member is reset); `disable_passes` a comma-
// separated list of pass names (appended to options.disabled_passes). An unknown name, a process
// knob or a bad value is an rlx::Error naming the knob, its type and range, and the valid names.
void set_knob(CompileOptions& options, std::string_view name, std::string_view value);

// The knob table as Markdown (the "Tuning knobs" table of docs/development.md).
std::string knob_table_markdown();

}  // namespace rlx
