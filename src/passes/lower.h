#pragma once
// Lowering passes at the head of the pipeline.
#include "passes/pass.h"

namespace rlx::passes {

// If with a constant condition is replaced by its taken branch, inlined (when the branch's
// params are in its own weights). Other control flow is kept (the shared legalize turns an If
// into both branches + Where for backends that do not run If).
Graph lower_control_flow(const Graph& g, const PassContext& ctx = {});
// DotGeneral becomes Transpose/Reshape + MatMul + Reshape, so the matmul fusions see it.
Graph lower_dot_general(const Graph& g, const PassContext& ctx = {});
// Recurrent nodes the backend does not run (ctx.backend does not claim them) are unrolled over
// their time steps (expand_recurrent.h) here, before the fusions, so that the optimizer fuses the
// per-step ops as it would a graph written step by step. A symbolic sequence length is left to
// the legalize (which reports it).
Graph lower_recurrent(const Graph& g, const PassContext& ctx = {});

}  // namespace rlx::passes
