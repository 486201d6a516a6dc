#pragma once
// The kernel family of each op kind: which kind of kernel a GPU backend runs a step of it with
// (its lowering dispatch switches on it), and how `rlx check` groups its report. Every op kind
// has exactly one family; a backend may still leave a kind of a family unclaimed (legalized).
#include <cstdint>
#include <optional>
#include <string_view>

#include "rlx/ops.h"

namespace rlx::plan {

enum class StepFamily : uint8_t {
  Leaf,         // Input, Param, Constant: no work (their bytes are uploaded)
  Elementwise,  // Binary, Compare, Where, Activation, Cast, ElementwiseRegion: generated chains
  Matmul,       // MatMul, FusedMatMulBiasAct, LoraMatMul, DotGeneral, GroupedMatMul, DequantMatMul, MatMulInteger
  Rows,         // one row, axis or group per block: Softmax, LogSoftmax, Reduce, the norms, FusedSwiGLU
  Copy,         // data movement: Reshape, StopGradient, Transpose, Narrow, Concat, Expand, Reverse,
                // Gather, Pad
  Rope,         // Rope
  Attention,    // Attention, FusedAttentionBlock, FusedTransformerLayer
  Select,       // per-row selection: ArgMax, ArgMin, TopK, Sample
  Scan,         // Cumsum
  Scatter,      // ScatterAdd, CacheWrite
  Random,       // RngUniform, RngNormal
  Spatial,      // windows and resampling over the spatial dims: Conv, ConvInteger, ConvTranspose, Pool, Im2Col, Resize
  Control,      // If, While (subgraphs), Recurrent (a loop over the time steps)
};

StepFamily step_family(const Op& op);
// The family of the op kind named `op_name` (as op_name gives it), nullopt for no op kind.
std::optional<StepFamily> step_family(std::string_view op_name);
// "matmul", "elementwise", ...
const char* family_name(StepFamily f);

}  // namespace rlx::plan
