#pragma once
// The resolved tuning knobs (the table and the rules: rlx/tuning.h, src/runtime/knobs.cpp).
//
// resolve_knobs(options) reads every compile-scope knob once (the CompileOptions member, else
// the environment variable, else the default), validates it, and returns an immutable
// ResolvedKnobs that the optimizer and the lowering read through typed accessors
// (`knobs.gemv_packed()`); `process_knobs::` reads the process settings from the environment.
// No other code reads an RLX_* environment variable (tests/runtime/test_knobs.cpp checks).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/session.h"
#include "rlx/tuning.h"

// The process-scope knobs, as X-macro rows like RLX_TUNING_KNOBS (environment only).
#define RLX_PROCESS_KNOBS(BOOL, INT, AUTO, STRING) \
  INT(cpu_spin_us) \
  INT(cuda_device) STRING(cuda_pdl) BOOL(cuda_profile) STRING(cache_dir) STRING(cublaslt_lib) STRING(nvrtc_lib) \
  STRING(cudnn_lib) AUTO(bench_profile_run) \
  STRING(vulkan_device) BOOL(vulkan_validation) BOOL(vulkan_profile) STRING(vulkan_dump) BOOL(vulkan_pipeline_stats) \
  STRING(webgpu_lib) STRING(webgpu_backend) STRING(webgpu_vk_icd) STRING(webgpu_adapter) BOOL(webgpu_robustness) BOOL(webgpu_profile) \
  INT(webgpu_wait_s)

namespace rlx {

class ResolvedKnobs {
 public:
  // One accessor per RLX_TUNING_KNOBS row: bool, int64_t, std::optional<int64_t> (an auto knob:
  // nullopt = the code's choice) or const std::string& (empty = unset, the code's default).
#define RLX_KNOB_BOOL(name) \
  bool name() const { return v_.name; }
#define RLX_KNOB_INT(name) \
  int64_t name() const { return v_.name; }
#define RLX_KNOB_AUTO(name) \
  std::optional<int64_t> name() const { return v_.name; }
#define RLX_KNOB_STRING(name) \
  const std::string& name() const { return v_.name; }
  RLX_TUNING_KNOBS(RLX_KNOB_BOOL, RLX_KNOB_INT, RLX_KNOB_AUTO, RLX_KNOB_STRING)
#undef RLX_KNOB_BOOL
#undef RLX_KNOB_INT
#undef RLX_KNOB_AUTO
#undef RLX_KNOB_STRING

  // CompileOptions::pass_report or RLX_PASS_REPORT.
  bool pass_report() const { return pass_report_; }
  // The pass names of RLX_DISABLE_PASSES (skipped in addition to CompileOptions::disabled_passes).
  const std::vector<std::string>& disable_passes() const { return disable_passes_; }

  // Where knob `name`'s value came from, for messages: "CompileOptions::tuning.cuda_attn_tile",
  // the environment variable ("RLX_CUDA_ATTN_TILE") or "the default".
  std::string origin(std::string_view name) const;

 private:
  friend ResolvedKnobs resolve_knobs(const CompileOptions& options);
  struct Values {
#define RLX_KNOB_BOOL(name) bool name = false;
#define RLX_KNOB_INT(name) int64_t name = 0;
#define RLX_KNOB_AUTO(name) std::optional<int64_t> name;
#define RLX_KNOB_STRING(name) std::string name;
    RLX_TUNING_KNOBS(RLX_KNOB_BOOL, RLX_KNOB_INT, RLX_KNOB_AUTO, RLX_KNOB_STRING)
#undef RLX_KNOB_BOOL
#undef RLX_KNOB_INT
#undef RLX_KNOB_AUTO
#undef RLX_KNOB_STRING
  };
  enum class Origin : uint8_t { Default, Options, Env };
  Values v_;
  bool pass_report_ = false;
  std::vector<std::string> disable_passes_;
  std::vector<Origin> origins_;  // by knob_table() index
};

// Resolves the compile-scope knobs of one compile. A malformed or out-of-range value is an
// rlx::Error naming the member or variable, its range and the knob.
ResolvedKnobs resolve_knobs(const CompileOptions& options);

// The process-scope knobs, read from the environment at each call (validated the same way).
namespace process_knobs {
#define RLX_KNOB_BOOL(name) bool name();
#define RLX_KNOB_INT(name) int64_t name();
#define RLX_KNOB_AUTO(name) std::optional<int64_t> name();
#define RLX_KNOB_STRING(name) std::string name();
RLX_PROCESS_KNOBS(RLX_KNOB_BOOL, RLX_KNOB_INT, RLX_KNOB_AUTO, RLX_KNOB_STRING)
#undef RLX_KNOB_BOOL
#undef RLX_KNOB_INT
#undef RLX_KNOB_AUTO
#undef RLX_KNOB_STRING
}  // namespace process_knobs

}  // namespace rlx
