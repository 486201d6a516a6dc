#pragma once
// The one shared legalize: decomposes every node a backend does not claim into primitives it
// does, for every backend (no per-backend copies).
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "passes/pass.h"
#include "passes/rewriter.h"

namespace rlx::passes {

// Is node `n` of `g` executed natively?
using ClaimFn = std::function<bool(const Graph& g, const Node& n)>;
// Why the backend does not run node `n` natively ("" when it has nothing to add).
using ReasonFn = std::function<std::string(const Graph& g, const Node& n)>;

// Emits the decomposition of `n` into rw's output graph and records the replacement. Returns
// false when `n` has no decomposition. Covered: FusedMatMulBiasAct, FusedResidualLN/RmsNorm,
// FusedSwiGLU, LoraMatMul, FusedAttentionBlock, FusedTransformerLayer, ElementwiseRegion,
// DotGeneral, If (both branches + Where), GroupNorm, BatchNormInference, LayerNorm2d, Resize
// (Gathers + a lerp, static resized axes), Im2Col (Pad + Gather), Conv (asymmetric pads: Pad +
// Conv; 1-d/2-d: Im2Col + MatMul), Pool (pads or ceil_mode: Pad + plain Pool, averages rescaled;
// small-integer max pools in f32; a plain pool as a Gather of its windows and a Reduce), and
// Reduce/Softmax/LogSoftmax/ArgMax/ArgMin/Cumsum/LayerNorm/RmsNorm over axes other than the
// last one (moved last by a transpose or flattened by a reshape), CacheWrite (a Where over the
// cache) and Attention with a Positions mask (the Bias mask of those positions): expand_cache.h;
// Recurrent unrolled over its (static) time steps: expand_recurrent.h.
bool expand_node(Rewriter& rw, const Node& n);

// The primitive chain of an ElementwiseRegion from new operand values (used by unfuse too).
Value expand_region(Graph& g, const ops::ElementwiseRegion& r, const std::vector<Value>& ins);

// Inlines subgraph `sub` into `g` with its Input nodes (in node order) bound to `args`; its
// Param nodes must be in its own weights (they become constants). nullopt when one is not.
std::optional<std::vector<Value>> inline_subgraph(Graph& g, const Graph& sub, const std::vector<Value>& args);

// One rewrite round: expands every unclaimed node that has a decomposition.
// `changed` (optional) tells whether any node was expanded.
Graph expand_unclaimed(const Graph& g, const ClaimFn& claims, bool* changed = nullptr);

// Legalize: expands unclaimed nodes until every node is claimed (a few rounds: an expansion
// may use primitives that need their own legalization), then verifies. Nodes left unclaimed
// -> one rlx::Error listing each (id, op, input and output shapes, and `why` when given) for
// `device_label`.
Graph legalize(const Graph& g, const ClaimFn& claims, const std::string& device_label, const ReasonFn& why = {});

// How each op kind of `g` would run: native, decomposed (legalized), or unsupported.
struct DispatchRow {
  std::string op;
  size_t native = 0, decomposed = 0, unsupported = 0;
};
std::vector<DispatchRow> dispatch_report(const Graph& g, const ClaimFn& claims);

}  // namespace rlx::passes
