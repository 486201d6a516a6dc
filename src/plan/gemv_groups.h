#pragma once
// Launch groups of decode-shaped DequantMatMul steps (a quantized model's projections at a few
// rows): the products that read one x (q, k and v; gate and up) run as one launch, which may
// also compute x's RmsNorm itself, add a residual into its result, or write silu(gate) * up
// directly. Backend-neutral like plan/absorb_plans.h: the plan checks dataflow, memory and
// shapes; what the backend's kernels take comes in as GemvGroupLimits.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "plan/schedule.h"

namespace rlx::plan {

struct GemvGroupLimits {
  int64_t max_rows = 0;         // rows of x the backend's decode kernels take (0: no groups)
  size_t max_members = 3;       // products in one launch
  int64_t max_norm_values = 0;  // rows * k of an RmsNorm the launch computes (0: never)
};

// One launch of DequantMatMul products. The launch runs at members.back(); the other members
// and the absorbed steps are not run.
struct GemvGroup {
  // DequantMatMul steps in schedule order, reading the same x with one format, K and row size,
  // at most max_rows rows; no step between them reads a member's result or writes over x.
  std::vector<size_t> members;
  // The RmsNorm (no beta, over rows of K, x's dtype) whose result x is read by the members
  // alone: the launch normalizes the norm's input itself.
  std::optional<size_t> norm;
  // One member whose result only feeds an Add with an operand r of the same shape and dtype,
  // the step right after it: the launch writes result + r into the Add's result.
  std::optional<size_t> residual_add;
  // Two members of one N whose results only feed an ElementwiseRegion silu(a) * b, the step
  // right after the second: the launch writes the region's result. gate is the member (0 or 1)
  // that is a.
  std::optional<size_t> swiglu;
  size_t gate = 0;
};

// Groups keyed by their launch step (members.back()); single products appear only when they
// absorb a norm or a residual add. An absorbed step's result is never written over an operand
// the launch still reads (x or the norm's input, the weights, r unless exactly in place).
std::map<size_t, GemvGroup> plan_dequant_gemv_groups(const Schedule& s, const GemvGroupLimits& limits);

// The steps that the groups' launches take over (every member but the last, the absorbed
// norms, adds and regions).
std::set<size_t> steps_not_run(const std::map<size_t, GemvGroup>& groups);

}  // namespace rlx::plan
