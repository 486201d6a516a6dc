#pragma once
// The production pass pipeline: what Session::compile runs for a backend.
//
//   lower_control_flow -> lower_dot_general -> lower_recurrent -> canonicalize (fold, CSE, trivial ops, DCE)
//   -> exporter patterns (fold_conv_affine, fuse_gelu, fuse_silu, fuse_layer_norm, fuse_rms_norm,
//      fuse_attention) -> fuse_matmul_bias_act -> fuse_residual_ln / fuse_residual_rms_norm -> fuse_rms_norm_reshape
//   -> fuse_swiglu_dual_matmul -> fuse_shared_input_matmul -> fuse_swiglu -> fuse_attention_block
//   -> fuse_transformer_layer -> mark_elementwise_regions -> dce -> legalize (shared, always)
//
// Each fusion runs only when the backend claims the fused op kind it creates.
#include <string>
#include <vector>

#include "passes/pass.h"
#include "rlx/graph.h"
#include "rlx/session.h"
#include "runtime/backend.h"

namespace rlx::passes {

// Optimizes (when options.optimize) and legalizes `g` for `backend`; verifies the result.
// Prints the per-pass report when options.pass_report or RLX_PASS_REPORT=1.
Graph optimize_for_backend(const Graph& g, const Backend& backend, const CompileOptions& options);

// The optimizer alone (no legalize): the production passes for `backend`, with per-pass stats.
Graph optimize(const Graph& g, const Backend& backend, const CompileOptions& options,
               std::vector<PassStat>* stats = nullptr);

// Every pass name the pipeline knows, in pipeline order.
std::vector<std::string> pipeline_pass_names();
// Throws rlx::Error for a name that is not a pipeline pass (listing the valid ones).
void check_pass_names(const std::vector<std::string>& names);

// Throws one rlx::Error listing every node of `g` the backend can neither run nor have
// decomposed by legalize (id, op, shapes).
void check_legalizable(const Graph& g, const Backend& backend);

}  // namespace rlx::passes
