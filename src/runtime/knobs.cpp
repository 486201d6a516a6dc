// The knob table and its resolution (see rlx/tuning.h and runtime/knobs.h). This is the one
// place that reads RLX_* environment variables.
#include "runtime/knobs.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <deque>
#include <limits>

#include "rlx/error.h"

namespace rlx {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

constexpr KnobInfo boolean(const char* name, const char* env, bool on, const char* doc,
                           KnobScope scope = KnobScope::Compile) {
  return {name, env, KnobType::Bool, scope, 0, 1, false, on ? "1" : "0", "", "", doc};
}
constexpr KnobInfo integer(const char* name, const char* env, int64_t lo, int64_t hi, const char* def, const char* doc,
                           KnobScope scope = KnobScope::Compile) {
  return {name, env, KnobType::Int, scope, lo, hi, false, def, "", "", doc};
}
// An int whose default the code chooses (from the device, the shape, ...): `def` describes it.
constexpr KnobInfo automatic(const char* name, const char* env, int64_t lo, int64_t hi, const char* def,
                             const char* doc, KnobScope scope = KnobScope::Compile) {
  return {name, env, KnobType::Int, scope, lo, hi, true, def, "", "", doc};
}
// A string; unset (empty) is the default that `def` describes; `choices` "a|b|c" or "" (any).
constexpr KnobInfo text(const char* name, const char* env, const char* def, const char* choices, const char* doc,
                        KnobScope scope = KnobScope::Compile) {
  return {name, env, KnobType::String, scope, 0, 0, false, def, choices, "", doc};
}

constexpr KnobScope kProcess = KnobScope::Process;

// The table. Name = the variable without "RLX_", in lower case. Defaults and ranges are those
// of the code that reads the knob (an "auto" default is chosen there).
constexpr KnobInfo kKnobs[] = {
    // optimizer
    integer("fuse_attn_threshold", "RLX_FUSE_ATTN_THRESHOLD", 0, kMax, "64",
            "fuse_attention_block fires only when batch * seq is at most this"),
    boolean("pass_report", "RLX_PASS_REPORT", false,
            "print the optimizer's per-pass report (time, op counts) to stderr; or'ed with CompileOptions::pass_report"),
    text("disable_passes", "RLX_DISABLE_PASSES", "none", "",
         "comma-separated optimizer passes to skip, in addition to CompileOptions::disabled_passes"),
    // CPU
    boolean("cpu_pack_quant", "RLX_CPU_PACK_QUANT", true,
            "DequantMatMul weights (Param / Constant, Q4_0, Q4_1, Q8_0, K formats) repacked once into 8-row tiles for the "
            "CPU's integer kernels (0: the ggml blocks as stored)"),
    // CUDA: decode GEMVs
    integer("gemv_blocks_per_sm", "RLX_GEMV_BLOCKS_PER_SM", 1, 64, "4", "split-K GEMV blocks per SM (occupancy)"),
    automatic("gemv_evict_first", "RLX_GEMV_EVICT_FIRST", 0, 1, "auto",
              "GEMV weights loaded without (0) / with (1) the L2 evict-first policy; auto: with it when the graph's "
              "weights exceed the L2"),
    boolean("gemv_packed", "RLX_GEMV_PACKED", true, "packed-weight GEMV for param weights (0: the split-K kernel)"),
    boolean("gemv_tc", "RLX_GEMV_TC", true, "f16/bf16 packed GEMVs on the tensor cores (0: on the CUDA cores)"),
    automatic("gemv_packed_warps", "RLX_GEMV_PACKED_WARPS", 1, 32, "auto",
              "packed GEMV warps per block; auto: 32, or 24 for f16/bf16 on the CUDA cores"),
    automatic("gemv_tc_split", "RLX_GEMV_TC_SPLIT", 1, 32, "auto",
              "the tensor-core GEMV's warps per tile row (a divisor of the block's warps leaving at most 15 "
              "groups); auto: the whole block"),
    boolean("gemv_vec_a", "RLX_GEMV_VEC_A", true, "the packed GEMV reads A in 16-byte words (0: element by element)"),
    automatic("gemv_carveout", "RLX_GEMV_CARVEOUT", -1, 100, "auto",
              "the packed GEMV's shared-memory carveout in percent, -1 the driver's choice; auto: 80 for f32, -1 for "
              "2-byte types"),
    automatic("gemv_prefetch_mb", "RLX_GEMV_PREFETCH_MB", 0, 1 << 20, "auto",
              "MB of the next packed GEMV's weight a packed GEMV prefetches into L2 after other work (0 off; only "
              "with evict-first weights on sm_90+); auto: 70% of the L2"),
    automatic("gemv_prefetch_chained_mb", "RLX_GEMV_PREFETCH_CHAINED_MB", 0, 1 << 20, "auto",
              "the same right after a GEMV; auto: an eighth of the L2"),
    automatic("gemv_lpr", "RLX_GEMV_LPR", 1, 32, "auto",
              "GEMV lanes per weight row; auto: 32 for a weight of 64 MiB or more, else 64 / elements per 16 bytes"),
    boolean("gemv_l2pf", "RLX_GEMV_L2PF", false, "the GEMV prefetches its later weight rows into L2"),
    boolean("cuda_gemv_prologue", "RLX_CUDA_GEMV_PROLOGUE", true,
            "decode GEMVs absorb a preceding RmsNorm / SwiGLU as their prologue"),
    boolean("cuda_dequant_dp4a", "RLX_CUDA_DEQUANT_DP4A", true,
            "decode DequantMatMul (M <= 8) of q4_0/q8_0/q4_k/q6_k quantizes x to 8-bit blocks and uses integer dots"),
    boolean("cuda_dequant_groups", "RLX_CUDA_DEQUANT_GROUPS", true,
            "decode DequantMatMuls reading one x run as one launch (q/k/v, gate/up), which also computes x's RmsNorm, "
            "adds the residual or writes silu(gate) * up (plan::plan_dequant_gemv_groups)"),
    integer("cuda_dequant_gemm_rows", "RLX_CUDA_DEQUANT_GEMM_ROWS", 0, kMax, "16",
            "DequantMatMul with f32 x of at least this many rows (prefill) decodes the weight to f32 in chunks and "
            "multiplies with cuBLASLt (block formats on the TF32 tensor cores, f16/bf16 weights in the compile's "
            "precision); 0: never (the f32 decoder)"),
    // CUDA: attention
    integer("cuda_attn_decode_keys", "RLX_CUDA_ATTN_DECODE_KEYS", 1, 1 << 20, "64",
            "least keys per split of the decode attention"),
    integer("cuda_attn_cluster", "RLX_CUDA_ATTN_CLUSTER", 0, 16, "16",
            "most decode key splits merged in one thread-block cluster (0 or 1: merged through a ticket)"),
    boolean("cuda_attn_smkv", "RLX_CUDA_ATTN_SMKV", true,
            "decode blocks copy their cached K/V rows into shared memory before the wait"),
    boolean("cuda_attn_decode_tc", "RLX_CUDA_ATTN_DECODE_TC", true,
            "decode attention on the tensor-core kernel where it fits"),
    boolean("cuda_attn_decode_early", "RLX_CUDA_ATTN_DECODE_EARLY", true,
            "the decode attention launches before the QKV product's wait"),
    integer("cuda_attn_decode_tc_warps", "RLX_CUDA_ATTN_DECODE_TC_WARPS", 1, 16, "8",
            "warps of the tensor-core decode kernel (a power of two)"),
    automatic("cuda_attn_decode_tc_keys", "RLX_CUDA_ATTN_DECODE_TC_KEYS", 16, 64, "auto",
              "keys per warp chunk of the tensor-core decode kernel (a power of two); auto: 64 up to head_dim 64, "
              "else 32"),
    boolean("cuda_attn_mma", "RLX_CUDA_ATTN_MMA", true, "tensor-core attention (mma.sync, wgmma) for prefill"),
    text("cuda_attn_tile", "RLX_CUDA_ATTN_TILE", "auto", "",
         "the mma.sync attention tile 'warps,m_tiles,keys,q_in_regs' (warps 1/2/4/8, m_tiles 1/2, keys "
         "16/32/64/128, q_in_regs 0/1); auto: the measured tile for the head_dim"),
    text("cuda_attn_wgmma", "RLX_CUDA_ATTN_WGMMA", "1", "",
         "the Hopper wgmma attention: 0 off, 1 the measured tile, or 'groups,keys,stages,blocks[,pipelined]' "
         "(groups 1/2/3, keys 64/128, stages 2/3, blocks 1/2, pipelined 0/1)"),
    boolean("cuda_attn_concat", "RLX_CUDA_ATTN_CONCAT", true, "decode attention reads the KV-cache concat in place"),
    boolean("cuda_attn_rope", "RLX_CUDA_ATTN_ROPE", true,
            "decode attention rotates q and the new K rows itself (0: the RoPE steps run)"),
    boolean("cuda_rope_pairs", "RLX_CUDA_ROPE_PAIRS", true, "consecutive q and k RoPEs in one launch"),
    boolean("cuda_cache_write_pairs", "RLX_CUDA_CACHE_WRITE_PAIRS", true,
            "the k and v CacheWrites of one position vector in one launch (plan::plan_cache_write_pairs)"),
    boolean("cuda_cache_write_rope", "RLX_CUDA_CACHE_WRITE_ROPE", true,
            "a CacheWrite rotates its new rows itself when they are a RoPE's result used nowhere else "
            "(plan::plan_cache_write_ropes; 0: the RoPE step runs)"),
    // CUDA: elementwise kernels and launches
    boolean("cuda_tiny_early", "RLX_CUDA_TINY_EARLY", true,
            "elementwise kernels of at most 4 blocks launch early and let the next kernel launch before their wait"),
    boolean("cuda_graphs", "RLX_CUDA_GRAPHS", true, "runs replay their launches as a captured CUDA graph"),
    // Vulkan
    boolean("vulkan_coopmat", "RLX_VULKAN_COOPMAT", true,
            "f16 / bf16 matmuls and attention on cooperative matrices where the device has them"),
    boolean("vulkan_coopmat_khr", "RLX_VULKAN_COOPMAT_KHR", true,
            "f16 matrices as VK_KHR_cooperative_matrix (the NV kernels' SPIR-V rewritten) where the device lists "
            "them; 0: VK_NV_cooperative_matrix (bf16 matrices are KHR only)"),
    text("vulkan_gemm_tile", "RLX_VULKAN_GEMM_TILE", "auto", "",
         "the cooperative-matrix GEMM's tile 'wm,wn,tmc,tnc,bk': wm x wn subgroups of 32 (1-8 each, at most 32 "
         "in all), each tmc x tnc accumulators of 16 x 16 (1-8 each), bk deep K slices (16-256); auto: "
         "2,2,4,4,32 (128 x 128), 2,2,2,2,32 when those tiles would leave a large GPU idle, 2,2,1,1,128 when "
         "even 64 x 64 tiles would"),
    boolean("vulkan_gemm_splitk", "RLX_VULKAN_GEMM_SPLITK", true,
            "cooperative-matrix GEMMs of few 32 x 32 tiles and long K split K over workgroups (partial sums added "
            "by a second dispatch)"),
    boolean("vulkan_gemv_prologue", "RLX_VULKAN_GEMV_PROLOGUE", true,
            "vector GEMVs absorb a preceding RmsNorm / FusedSwiGLU of their rows as their prologue"),
    boolean("vulkan_rope_pairs", "RLX_VULKAN_ROPE_PAIRS", true, "consecutive q and k RoPEs in one Vulkan dispatch"),
    boolean("vulkan_cache_write_fusion", "RLX_VULKAN_CACHE_WRITE_FUSION", true,
            "the k and v CacheWrites of one position vector in one dispatch, rotating rows that are a RoPE's "
            "result used nowhere else (plan::plan_cache_write_pairs, plan::plan_cache_write_ropes)"),
    // WebGPU
    text("webgpu_limits", "RLX_WEBGPU_LIMITS", "adapter", "adapter|web",
         "what WebGPU kernels are compiled for: adapter = this adapter's limits and features; web = the WebGPU "
         "spec's default limits and no optional feature, so the kernels run on any browser's adapter (rlx "
         "export-web uses it)"),
    automatic("webgpu_attn_baked", "RLX_WEBGPU_ATTN_BAKED", 0, 1, "auto",
              "1: the attention kernel's head_dim and tile sizes are WGSL literals (loops unrolled, accumulators in "
              "registers: 3.5x faster on an H200), 0: uniform parameters (one pipeline for every size, fast to "
              "compile on CPU adapters); auto: 1 except on CPU adapters (rlx export-web: 1)"),
    automatic("webgpu_packed_weights", "RLX_WEBGPU_PACKED_WEIGHTS", 0, 1, "auto",
              "f16/bf16 weights (params, constants) read only by matmuls and gathers held as 16-bit values, two per "
              "word: 1 every such weight (half the memory; GEMMs unpack more slowly than they read words), 0 none "
              "(one f32 word per element like every other value); auto: those a GEMV (at most 4 rows) or a gather "
              "reads (half the bytes a decode step reads)"),
    boolean("webgpu_gemv_prologue", "RLX_WEBGPU_GEMV_PROLOGUE", true,
            "decode GEMVs compute a preceding RmsNorm / FusedSwiGLU of their rows in their prologue (that step is "
            "not run: one dispatch less each)"),
    // process settings
    integer("cpu_spin_us", "RLX_CPU_SPIN_US", 0, 1000000, "200",
            "microseconds an idle CPU worker thread keeps polling for the next parallel loop before it sleeps (0: "
            "sleep at once; waking a sleeping worker costs tens of microseconds, polling burns its core meanwhile)",
            kProcess),
    integer("cuda_device", "RLX_CUDA_DEVICE", 0, 65535, "0", "the CUDA device ordinal (below the device count)",
            kProcess),
    text("cuda_pdl", "RLX_CUDA_PDL", "1", "0|1|all",
         "programmatic dependent launch (sm_90+): 0 off, 1 the kernels that load before waiting, all every rlx kernel",
         kProcess),
    boolean("cuda_profile", "RLX_CUDA_PROFILE", false, "per-op device times (each op timed on its own, no CUDA graph)",
            kProcess),
    text("cache_dir", "RLX_CACHE_DIR", "$XDG_CACHE_HOME/rlx or ~/.cache/rlx", "",
         "folder of the kernel cache (NVRTC cubins in DIR/cuda); off: no cache", kProcess),
    text("cublaslt_lib", "RLX_CUBLASLT_LIB", "libcublasLt.so.N", "",
         "the cuBLASLt library file the CUDA backend loads when the CUDA device is created (default N: the CUDA major version rlx was "
         "built with; looked for on the loader's path, then in the build's toolkit folder)",
         kProcess),
    text("nvrtc_lib", "RLX_NVRTC_LIB", "libnvrtc.so.N", "",
         "the NVRTC library file the CUDA backend loads when the CUDA device is created (default N: the CUDA major version rlx was "
         "built with; looked for on the loader's path, then in the build's toolkit folder)",
         kProcess),
    text("cudnn_lib", "RLX_CUDNN_LIB", "libcudnn.so.N", "",
         "the cuDNN library file to load (default N: the major version of the cudnn.h rlx was built with)", kProcess),
    text("vulkan_device", "RLX_VULKAN_DEVICE", "the first discrete GPU, else integrated, else any", "",
         "the Vulkan device: an index in the loader's list or a part of its name", kProcess),
    boolean("vulkan_validation", "RLX_VULKAN_VALIDATION", false,
            "enables the Khronos validation layer (errors are counted; tests assert none)", kProcess),
    boolean("vulkan_profile", "RLX_VULKAN_PROFILE", false,
            "per-step Vulkan device times from timestamp queries (--profile)", kProcess),
    text("vulkan_dump", "RLX_VULKAN_DUMP", "off", "",
         "a folder receiving every recorded Vulkan dispatch: its GLSL (.comp) and its bindings, push constants and "
         "workgroups (.json), which bench/vk_kernel_lab replays",
         kProcess),
    boolean("vulkan_pipeline_stats", "RLX_VULKAN_PIPELINE_STATS", false,
            "pipelines keep the driver's statistics (registers, spills, ...) through "
            "VK_KHR_pipeline_executable_properties where the device has it; bench/vk_kernel_lab prints them",
            kProcess),
    text("webgpu_lib", "RLX_WEBGPU_LIB", "/usr/local/lib/rlx-webgpu/libwebgpu_wrapper.so", "",
         "the Dawn library (webgpu.h C API) the WebGPU backend loads; scripts/install-deps.sh installs the default",
         kProcess),
    text("webgpu_backend", "RLX_WEBGPU_BACKEND", "vulkan", "vulkan|opengles|opengl|d3d12|metal",
         "the native API under WebGPU that Dawn is asked for (Dawn's Null adapter is never taken)", kProcess),
    text("webgpu_vk_icd", "RLX_WEBGPU_VK_ICD", "auto", "",
         "the Vulkan driver manifest (ICD json) Dawn loads: auto = the system's drivers, and when they give no "
         "adapter Dawn accepts, SwiftShader from Debian's chromium package; system = the system's only; or a path",
         kProcess),
    text("webgpu_adapter", "RLX_WEBGPU_ADAPTER", "the adapter Dawn returns first", "",
         "a part of the WebGPU adapter's name that the chosen adapter must contain", kProcess),
    boolean("webgpu_robustness", "RLX_WEBGPU_ROBUSTNESS", false,
            "Dawn's bounds clamping of every WGSL buffer access and zeroing of workgroup memory (off: rlx's kernels "
            "check their own bounds, as in ONNX Runtime's WebGPU provider)",
            kProcess),
    boolean("webgpu_profile", "RLX_WEBGPU_PROFILE", false,
            "per-kernel WebGPU device times from timestamp queries, each dispatch in its own pass (--profile; the "
            "first 2048 dispatches of a run)",
            kProcess),
    integer("webgpu_wait_s", "RLX_WEBGPU_WAIT_S", 1, 86400, "300",
            "seconds one WebGPU wait (an adapter or device request, a submission's work, a readback) may take "
            "before it is an rlx::Error; CPU adapters (SwiftShader, lavapipe) on a loaded machine can need minutes "
            "for large kernels",
            kProcess),
    automatic("bench_profile_run", "RLX_BENCH_PROFILE_RUN", 0, 1000, "none",
              "bench_cuda: the i-th timed run of every case runs inside cudaProfilerStart/Stop (for ncu)", kProcess),
};

constexpr size_t kCount = sizeof(kKnobs) / sizeof(kKnobs[0]);

constexpr size_t index_of(std::string_view name) {
  for (size_t i = 0; i < kCount; ++i)
    if (name == kKnobs[i].name) return i;
  return kCount;
}

constexpr bool row_is(std::string_view name, KnobType type, bool is_auto, KnobScope scope) {
  const size_t i = index_of(name);
  return i < kCount && kKnobs[i].type == type && kKnobs[i].auto_default == is_auto && kKnobs[i].scope == scope;
}

// Every member of Tuning and every process accessor has its row, of its type and scope.
#define RLX_CHECK_BOOL(S, n) static_assert(row_is(#n, KnobType::Bool, false, S), #n ": no bool row of this scope");
#define RLX_CHECK_INT(S, n) static_assert(row_is(#n, KnobType::Int, false, S), #n ": no int row of this scope");
#define RLX_CHECK_AUTO(S, n) static_assert(row_is(#n, KnobType::Int, true, S), #n ": no auto int row of this scope");
#define RLX_CHECK_STRING(S, n) static_assert(row_is(#n, KnobType::String, false, S), #n ": no string row of this scope");
#define RLX_C_BOOL(n) RLX_CHECK_BOOL(KnobScope::Compile, n)
#define RLX_C_INT(n) RLX_CHECK_INT(KnobScope::Compile, n)
#define RLX_C_AUTO(n) RLX_CHECK_AUTO(KnobScope::Compile, n)
#define RLX_C_STRING(n) RLX_CHECK_STRING(KnobScope::Compile, n)
RLX_TUNING_KNOBS(RLX_C_BOOL, RLX_C_INT, RLX_C_AUTO, RLX_C_STRING)
#define RLX_P_BOOL(n) RLX_CHECK_BOOL(KnobScope::Process, n)
#define RLX_P_INT(n) RLX_CHECK_INT(KnobScope::Process, n)
#define RLX_P_AUTO(n) RLX_CHECK_AUTO(KnobScope::Process, n)
#define RLX_P_STRING(n) RLX_CHECK_STRING(KnobScope::Process, n)
RLX_PROCESS_KNOBS(RLX_P_BOOL, RLX_P_INT, RLX_P_AUTO, RLX_P_STRING)

// ... and the table has no other rows (pass_report and disable_passes are CompileOptions fields).
#define RLX_COUNT(n) +1
constexpr size_t kListed = 2 + RLX_TUNING_KNOBS(RLX_COUNT, RLX_COUNT, RLX_COUNT, RLX_COUNT)
    RLX_PROCESS_KNOBS(RLX_COUNT, RLX_COUNT, RLX_COUNT, RLX_COUNT);
static_assert(kListed == kCount, "a row of kKnobs has no Tuning member or process accessor");
static_assert(row_is("pass_report", KnobType::Bool, false, KnobScope::Compile) &&
              row_is("disable_passes", KnobType::String, false, KnobScope::Compile));

const KnobInfo& row(std::string_view name) { return kKnobs[index_of(name)]; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// "0, 1, all" for the choices "0|1|all".
std::string choices_text(const KnobInfo& k) {
  std::string r;
  for (const char* c = k.choices; *c; ++c) r += *c == '|' ? std::string(", ") : std::string(1, *c);
  return r;
}

std::string range_text(const KnobInfo& k) {
  switch (k.type) {
    case KnobType::Bool:
      return "1/0, true/false, on/off or yes/no";
    case KnobType::Int: {
      std::string r = "an integer in [" + std::to_string(k.lo) + ", " + (k.hi == kMax ? "2^63-1" : std::to_string(k.hi)) + "]";
      return k.auto_default ? r + " or 'auto'" : r;
    }
    case KnobType::String: {
      return *k.choices ? "one of " + choices_text(k) : std::string("text");
    }
  }
  return "";
}

[[noreturn]] void bad_value(const KnobInfo& k, const std::string& where, std::string_view value) {
  // `where` is the variable, the CompileOptions member or "knob <name>": name the knob when it
  // does not already.
  const std::string knob = where.find(k.name) == std::string::npos ? std::string("knob ") + k.name + ": " : "";
  throw Error(where + "='" + std::string(value) + "': expected " + range_text(k) + " (" + knob + k.doc + "; default " +
              (*k.default_text ? k.default_text : "unset") + ")");
}

bool parse_bool(const KnobInfo& k, const std::string& where, std::string_view text) {
  const std::string v = lower(text);
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  bad_value(k, where, text);
}

// nullopt: "auto" for an auto knob.
std::optional<int64_t> parse_int(const KnobInfo& k, const std::string& where, std::string_view text) {
  if (k.auto_default && lower(text) == "auto") return std::nullopt;
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const bool digits = !s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-' || s[0] == '+');
  const long long v = digits ? std::strtoll(s.c_str(), &end, 10) : 0;
  if (!digits || end == s.c_str() || *end != '\0' || errno == ERANGE || v < k.lo || v > k.hi)
    bad_value(k, where, text);
  return static_cast<int64_t>(v);
}

void check_int(const KnobInfo& k, const std::string& where, int64_t v) {
  if (v < k.lo || v > k.hi) bad_value(k, where, std::to_string(v));
}

void check_string(const KnobInfo& k, const std::string& where, std::string_view v) {
  if (!*k.choices) return;
  std::string_view rest = k.choices;
  while (true) {
    const size_t bar = rest.find('|');
    if (rest.substr(0, bar) == v) return;
    if (bar == std::string_view::npos) break;
    rest.remove_prefix(bar + 1);
  }
  bad_value(k, where, v);
}

// The variable's text; nullopt when unset or empty.
std::optional<std::string> env_text(const KnobInfo& k) {
  const char* e = std::getenv(k.env);
  if (e == nullptr || *e == '\0') return std::nullopt;
  return std::string(e);
}

std::string member_name(const KnobInfo& k) { return std::string("CompileOptions::") + knob_table()[index_of(k.name)].field; }

using Origin = uint8_t;  // ResolvedKnobs::Origin, as stored
constexpr Origin kDefault = 0, kOptions = 1, kEnv = 2;

// Each resolve_* returns the knob's value: the CompileOptions member `set` when it has one,
// else the environment variable when set and non-empty, else the default; `origin` says which.
bool resolve_bool(const KnobInfo& k, const std::optional<bool>& set, Origin& origin) {
  if (set) {
    origin = kOptions;
    return *set;
  }
  if (auto e = env_text(k)) {
    origin = kEnv;
    return parse_bool(k, k.env, *e);
  }
  origin = kDefault;
  return parse_bool(k, "the default", k.default_text);
}

std::optional<int64_t> resolve_auto(const KnobInfo& k, const std::optional<int64_t>& set, Origin& origin) {
  if (set) {
    origin = kOptions;
    check_int(k, member_name(k), *set);
    return set;
  }
  if (auto e = env_text(k)) {
    origin = kEnv;
    return parse_int(k, k.env, *e);
  }
  origin = kDefault;
  return std::nullopt;
}

int64_t resolve_int(const KnobInfo& k, const std::optional<int64_t>& set, Origin& origin) {
  if (set) {
    origin = kOptions;
    check_int(k, member_name(k), *set);
    return *set;
  }
  if (auto e = env_text(k)) {
    origin = kEnv;
    return *parse_int(k, k.env, *e);
  }
  origin = kDefault;
  return *parse_int(k, "the default", k.default_text);
}

// An empty member counts as unset.
std::string resolve_string(const KnobInfo& k, const std::optional<std::string>& set, Origin& origin) {
  if (set && !set->empty()) {
    origin = kOptions;
    check_string(k, member_name(k), *set);
    return *set;
  }
  if (auto e = env_text(k)) {
    origin = kEnv;
    check_string(k, k.env, *e);
    return *e;
  }
  origin = kDefault;
  return std::string();
}

std::vector<std::string> split_names(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (s[i] != ' ') {
      cur += s[i];
    }
  }
  return out;
}

std::string known_names() {
  std::string list;
  for (const KnobInfo& k : kKnobs)
    if (k.scope == KnobScope::Compile) list += (list.empty() ? "" : ", ") + std::string(k.name);
  return list;
}

}  // namespace

const std::vector<KnobInfo>& knob_table() {
  static const std::vector<KnobInfo> table = [] {
    static std::deque<std::string> fields;  // storage of the `field` texts
    std::vector<KnobInfo> t(std::begin(kKnobs), std::end(kKnobs));
    for (KnobInfo& k : t) {
      if (k.scope == KnobScope::Process) continue;
      const std::string name = k.name;
      fields.push_back(name == "pass_report"      ? name
                       : name == "disable_passes" ? std::string("disabled_passes")
                                                  : "tuning." + name);
      k.field = fields.back().c_str();
    }
    return t;
  }();
  return table;
}

const KnobInfo* find_knob(std::string_view name) {
  for (const KnobInfo& k : knob_table())
    if (name == k.name || name == k.env) return &k;
  return nullptr;
}

void set_knob(CompileOptions& options, std::string_view name, std::string_view value) {
  const KnobInfo* k = find_knob(name);
  if (k == nullptr)
    throw Error("unknown knob '" + std::string(name) + "' (knobs: " + known_names() + "; `rlx knobs` lists them)");
  if (k->scope == KnobScope::Process)
    throw Error(std::string("knob '") + k->name + "' is a process setting, not a compile option: set " + k->env +
                " in the environment instead");
  const std::string where = std::string("knob ") + k->name;
  const std::string_view n = k->name;
  if (n == "pass_report") {
    options.pass_report = parse_bool(*k, where, value);
    return;
  }
  if (n == "disable_passes") {
    for (std::string& p : split_names(value)) options.disabled_passes.push_back(std::move(p));
    return;
  }
  Tuning& t = options.tuning;
#define RLX_SET_BOOL(m)                     \
  if (n == #m) {                            \
    t.m = parse_bool(*k, where, value);     \
    return;                                 \
  }
#define RLX_SET_INT(m)                      \
  if (n == #m) {                            \
    t.m = parse_int(*k, where, value);      \
    return;                                 \
  }
#define RLX_SET_STRING(m)                   \
  if (n == #m) {                            \
    check_string(*k, where, value);         \
    t.m = std::string(value);               \
    return;                                 \
  }
  RLX_TUNING_KNOBS(RLX_SET_BOOL, RLX_SET_INT, RLX_SET_INT, RLX_SET_STRING)
#undef RLX_SET_BOOL
#undef RLX_SET_INT
#undef RLX_SET_STRING
  throw Error(std::string("knob '") + k->name + "': internal: no Tuning member");
}

ResolvedKnobs resolve_knobs(const CompileOptions& options) {
  ResolvedKnobs r;
  std::vector<Origin> origins(kCount, kDefault);
  const Tuning& t = options.tuning;
#define RLX_RESOLVE(kind, m) r.v_.m = resolve_##kind(row(#m), t.m, origins[index_of(#m)]);
#define RLX_R_BOOL(m) RLX_RESOLVE(bool, m)
#define RLX_R_INT(m) RLX_RESOLVE(int, m)
#define RLX_R_AUTO(m) RLX_RESOLVE(auto, m)
#define RLX_R_STRING(m) RLX_RESOLVE(string, m)
  RLX_TUNING_KNOBS(RLX_R_BOOL, RLX_R_INT, RLX_R_AUTO, RLX_R_STRING)
  r.pass_report_ = options.pass_report ||
                   resolve_bool(row("pass_report"), std::nullopt, origins[index_of("pass_report")]);
  if (options.pass_report) origins[index_of("pass_report")] = kOptions;
  r.disable_passes_ =
      split_names(resolve_string(row("disable_passes"), std::nullopt, origins[index_of("disable_passes")]));
  r.origins_.reserve(kCount);
  for (Origin o : origins) r.origins_.push_back(static_cast<ResolvedKnobs::Origin>(o));
  return r;
}

std::string ResolvedKnobs::origin(std::string_view name) const {
  const size_t i = index_of(name);
  if (i >= kCount || kKnobs[i].scope != KnobScope::Compile) throw Error("origin: unknown knob '" + std::string(name) + "'");
  switch (origins_.at(i)) {
    case Origin::Options:
      return member_name(kKnobs[i]);
    case Origin::Env:
      return kKnobs[i].env;
    case Origin::Default:
      break;
  }
  return "the default";
}

namespace process_knobs {
#define RLX_P_ACCESSOR(type, kind, m)       \
  type m() {                                \
    Origin o = kDefault;                    \
    return resolve_##kind(row(#m), {}, o);  \
  }
#define RLX_PA_BOOL(m) RLX_P_ACCESSOR(bool, bool, m)
#define RLX_PA_INT(m) RLX_P_ACCESSOR(int64_t, int, m)
#define RLX_PA_AUTO(m) RLX_P_ACCESSOR(std::optional<int64_t>, auto, m)
#define RLX_PA_STRING(m) RLX_P_ACCESSOR(std::string, string, m)
RLX_PROCESS_KNOBS(RLX_PA_BOOL, RLX_PA_INT, RLX_PA_AUTO, RLX_PA_STRING)
}  // namespace process_knobs

std::string knob_table_markdown() {
  auto cell = [](std::string s) {
    std::string out;
    for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
    return out;
  };
  auto type_name = [](KnobType t) { return t == KnobType::Bool ? "bool" : t == KnobType::Int ? "int" : "string"; };
  std::string md = "| knob | variable | type | values | default | CompileOptions | what it does |\n"
                   "|---|---|---|---|---|---|---|\n";
  for (const KnobInfo& k : knob_table()) {
    std::string values;
    if (k.type == KnobType::Bool) values = "0/1";
    else if (k.type == KnobType::Int)
      values = "[" + std::to_string(k.lo) + ", " + (k.hi == kMax ? "2^63-1" : std::to_string(k.hi)) + "]";
    else values = *k.choices ? choices_text(k) : "text";
    const std::string field = k.scope == KnobScope::Process ? "(process: environment only)" : "`" + std::string(k.field) + "`";
    md += "| `" + std::string(k.name) + "` | `" + k.env + "` | " + type_name(k.type) + " | " + cell(values) + " | " +
          cell(k.default_text) + " | " + field + " | " + cell(k.doc) + " |\n";
  }
  return md;
}

}  // namespace rlx
