#pragma once
// Decompositions of the vision ops that have no kernel on some backend (Resize, Im2Col) into
// Gather, Pad, Reshape and elementwise ops, used by the shared legalize (expand_node).
#include <optional>

#include "rlx/graph.h"

namespace rlx::passes {

// Resize of x to `out` (the node's output shape) as one Gather per resized axis (nearest) or
// two Gathers and a lerp with constant weights (linear; f16/bf16 interpolate in f32 and round
// once at the end). nullopt when a resized axis is symbolic.
std::optional<Value> expand_resize(Graph& g, const ops::Resize& op, Value x, const Shape& out);

// Im2Col of x (N, C, H, W) as a zero Pad, a Gather of each window position from the flattened
// H*W plane, and reshapes (torch unfold order).
Value expand_im2col(Graph& g, const ops::Im2Col& op, Value x);

}  // namespace rlx::passes
