#pragma once
// The fusion passes (names as in the pipeline). Each replaces a pattern by one fused op only
// when every absorbed intermediate has exactly one consumer and is not a graph output, and
// when the fused op's own shape inference accepts the operands; otherwise the graph is copied
// unchanged. Semantics of each fused op: include/rlx/ops.h.
#include "passes/pass.h"

namespace rlx::passes {

// MatMul -> Add(bias of rank <= 1 over the last axis) -> optional Gelu/GeluApprox/Silu/Relu
// becomes FusedMatMulBiasAct [x, w, bias].
Graph fuse_matmul_bias_act(const Graph& g, const PassContext& ctx = {});
// Add(product, r) with the product a MatMul or FusedMatMulBiasAct used only there and r of the
// sum's shape becomes FusedMatMulBiasAct{residual} [x, w, bias?, r] (pre-norm residual adds,
// which fuse_residual_ln / fuse_residual_rms_norm leave alone because the sum has two users).
Graph fuse_matmul_residual(const Graph& g, const PassContext& ctx = {});
// Add(x, r) -> LayerNorm / RmsNorm over the last axis becomes FusedResidualLN /
// FusedResidualRmsNorm [x, r, gamma, beta?] (x and r of the same shape).
Graph fuse_residual_ln(const Graph& g, const PassContext& ctx = {});
Graph fuse_residual_rms_norm(const Graph& g, const PassContext& ctx = {});
// RmsNorm over the last axis followed by a reshape to [prod(leading), H] becomes the reshape
// followed by the RmsNorm (the norm writes the flattened result directly).
Graph fuse_rms_norm_reshape(const Graph& g, const PassContext& ctx = {});
// mul(x @ Wup, silu(x @ Wgate)) (either operand order; weights rank 2 of the same shape)
// becomes FusedSwiGLU(x @ concat(Wup, Wgate, axis 1)).
Graph fuse_swiglu_dual_matmul(const Graph& g, const PassContext& ctx = {});
// N >= 2 MatMuls reading the same x with rank-2 weights (Param/Constant) of equal K become one
// MatMul on the weights concatenated along N, followed by one Narrow per original product.
Graph fuse_shared_input_matmul(const Graph& g, const PassContext& ctx = {});
// mul(narrow(c, 0, N), silu(narrow(c, N, N))) over the last axis of c (..., 2N) becomes
// FusedSwiGLU{gate_first=false}; mul(silu(first half), second half) becomes gate_first=true.
Graph fuse_swiglu(const Graph& g, const PassContext& ctx = {});
// qkv projection (FusedMatMulBiasAct without activation, or MatMul) -> 3 last-axis Narrows ->
// Reshape to (B, S, H, D) -> Attention(Custom key-padding mask, BSHD, default scale) -> Reshape
// (B, S, E) -> output projection becomes FusedAttentionBlock, when B * S <= ctx.attention_threshold.
Graph fuse_attention_block(const Graph& g, const PassContext& ctx = {});
// A post-norm BERT layer built from FusedAttentionBlock, FusedResidualLN and two
// FusedMatMulBiasAct becomes FusedTransformerLayer (14 inputs, see ops.h).
Graph fuse_transformer_layer(const Graph& g, const PassContext& ctx = {});

// Elementwise regions (regions.cpp).
// Maximal single-consumer chains of Activation / same-dtype-float Cast / Binary / Compare /
// Where (at least 2 ops) become ElementwiseRegion; limits: 32 steps, 16 external inputs.
Graph mark_elementwise_regions(const Graph& g, const PassContext& ctx = {});
// Every ElementwiseRegion back into its primitive nodes.
Graph unfuse_elementwise_regions(const Graph& g, const PassContext& ctx = {});
// Splits regions longer than `max_steps` (or with more than `max_inputs` inputs) into
// consecutive regions that respect the limits.
Graph clip_elementwise_regions(const Graph& g, size_t max_steps, size_t max_inputs);

}  // namespace rlx::passes
