#pragma once
// Decompositions of the vision ops that have no kernel on some backend (Resize, Im2Col, Conv and
// Pool beyond what a library runs) into Gather, Pad, MatMul, Reshape and elementwise ops, used
// by the shared legalize (expand_node).
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

// Conv [x, w, bias?] with pads that differ between the two ends of an axis: a zero Pad and the
// same Conv without pads (what cuDNN runs). Otherwise, 1-d and 2-d with static spatial dims: an
// Im2Col and one batched MatMul over the groups ((G, Cout/G, K) @ (N, G, K, L)), plus the bias.
// nullopt otherwise (3-d, symbolic spatial dims).
std::optional<Value> expand_conv(Graph& g, const ops::Conv& op, const std::vector<Value>& in, const Shape& out);

// ConvTranspose [x, w, bias?] (2-d) as a Conv of stride 1: zeros inserted between x's elements
// (a Reshape, a Pad of the new unit axes, a Reshape), a Pad (or crop, for pads larger than the
// kernel's reach) by dilation * (k - 1) - pads, plus output_padding at the end, and the kernel
// flipped with its channels swapped per group. The Conv is then what the backend runs (cuDNN with
// no pads, or Im2Col + MatMul).
Value expand_conv_transpose(Graph& g, const ops::ConvTranspose& op, const std::vector<Value>& in);

// Pool with pads or ceil_mode (which cuDNN cannot always count as the op does): a Pad that holds
// every window (zeros; -inf for max) and the plain Pool, for averages times a constant (kernel
// size / the taps the op counts at each output). A max pool of u8/i8/i16 runs in f32 between two
// Casts. A plain pool (no pads, no ceil_mode) that is still not run (dilated: cuDNN has none)
// gathers every window's taps and reduces them (max / mean). nullopt otherwise (symbolic spatial
// dims, other integer pools).
std::optional<Value> expand_pool(Graph& g, const ops::Pool& op, Value x, const Shape& out);

}  // namespace rlx::passes
