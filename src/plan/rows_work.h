#pragma once
// The backend-neutral description of a Rows-family step (plan/step_family.h): which kind of
// rows kernel it needs and, for the norms, the line geometry and gamma indexing. A GPU backend's
// rows lowering switches on it and keeps only its kernel templates and dispatch code. Also the
// claim checks of the family that do not depend on a backend's shader language.
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "plan/schedule.h"
#include "rlx/graph.h"

namespace rlx::plan {

// Reduce: the kernel reads the step's ReduceGeom.
struct ReduceWork {};
// Softmax (log = false) or LogSoftmax (log = true) over the step's AxisGeom.
struct SoftmaxWork {
  bool log = false;
};
// LayerNorm / RmsNorm (rms), FusedResidualLN / FusedResidualRmsNorm (res: x + residual is
// normalized and also written), GroupNorm: `rows` lines of `len` contiguous elements, each
// normalized with `eps`, scaled by gamma (and shifted by beta when `beta`).
struct NormWork {
  bool rms = false, res = false, beta = false;
  double eps = 0;
  int64_t rows = 0, len = 0;
  int64_t gmod = 1, gmul = 0, gdiv = 1;  // gamma index (row % gmod) * gmul + j / gdiv
};
// FusedSwiGLU over the step's AxisGeom (axis = 2N, out_axis = N).
struct SwiGLUWork {
  bool gate_first = false;
};
using RowsWork = std::variant<ReduceWork, SoftmaxWork, NormWork, SwiGLUWork>;

// Reduce step `st` (geometry ReduceGeom) as the rows kernels walk it: the kept and the reduced
// axis groups of the input (at most 4 each, outermost first) with their element strides, and
// whether a line is one output's reduced elements (row_first: the reduced group is innermost).
// Throws rlx::Error naming the node for an empty Max / Min / integer Mean, a size of 2^31 or
// more, and more than 4 groups of either kind (`backend` names whose kernels refuse).
struct ReduceWalk {
  std::vector<uint32_t> kept_dims, kept_strides, reduced_dims, reduced_strides;
  bool row_first = false;
  uint32_t outputs = 0, count = 0;  // output elements, elements reduced into each
};
ReduceWalk reduce_walk(const Step& st, std::string_view backend);

// v as a 32-bit size, or rlx::Error starting with `what` (the `backend`'s rows kernels index with
// 32 bits).
uint32_t rows_u32(int64_t v, const std::string& what, std::string_view backend);

// The work of Rows step `st`. Throws rlx::Error naming the node when the fused residual norm's
// has_bias does not agree with its beta input, when GroupNorm's groups does not divide C, and
// for an op the rows kernels do not take (`backend`, e.g. "Vulkan", names who refuses it).
RowsWork rows_work(const Step& st, std::string_view backend);

// The op kinds the rows kernels take (LayerNorm2d and BatchNormInference are legalized).
bool rows_claims_kind(std::string_view op_name);

// Language-independent claim checks of a Rows node, in the order a backend's claims make them
// (each returns false and sets *why, when given, on a refusal):
// every operand and output in the first input's dtype (`backend` names who refuses) ...
bool rows_claims_dtypes_agree(const Graph& g, const Node& n, std::string_view backend, std::string* why);
// ... and, after the backend's dtype checks, the attribute checks: a fused residual norm's
// has_bias agrees with its beta input, GroupNorm's x has rank >= 2.
bool rows_claims_attributes(const Graph& g, const Node& n, std::string* why);

}  // namespace rlx::plan
