#pragma once
// Exporter-pattern passes: recognize what ONNX exporters (PyTorch, paddle2onnx, spox) spell out
// op by op and turn it into rlx's fused ops. Each fires only on an exact match: every absorbed
// intermediate is read only inside the pattern and is not a graph output, constants are scalars
// (or per-channel) within a tight tolerance of the expected value, and the backend runs the
// node it would create (PassContext::backend's claims on that very node).
#include "passes/pass.h"

namespace rlx::passes {

// Conv [x, w, b?] with Constant w (and b) followed by BatchNormInference with Constant
// scale/bias/mean/var, or by Mul/Div/Add/Sub with a per-channel Constant (shape broadcasting
// only along the channel axis), each the single reader of the previous value: folded into a
// Conv with new Constant weight and bias (computed in double, stored in the weight dtype).
Graph fold_conv_affine(const Graph& g, const PassContext& ctx = {});
// x * 0.5 * (1 + erf(x / sqrt(2))) (any association, Div by sqrt(2) or Mul by 1/sqrt(2))
// => Activation{Gelu}; 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) (x^3 as Pow or
// products; also the x * sqrt(2/pi) * (1 + 0.044715 * x * x) spelling) => Activation{GeluApprox}.
Graph fuse_gelu(const Graph& g, const PassContext& ctx = {});
// x * sigmoid(x) (either order) => Activation{Silu}.
Graph fuse_silu(const Graph& g, const PassContext& ctx = {});
// mean = ReduceMean(x, last, keep); d = x - mean; var = ReduceMean(d^2 | d*d, last, keep);
// d / sqrt(var + eps) (or d * rsqrt(..), d * reciprocal(sqrt(..)), d * (1 / sqrt(..)))
// [* gamma[H]] [+ beta[H]] => LayerNorm (gamma of ones when absent); with x = Cast(x0 -> f32)
// and the result cast back to x0's dtype before gamma, the norm runs on x0.
Graph fuse_layer_norm(const Graph& g, const PassContext& ctx = {});
// x * rsqrt(ReduceMean(x^2 | x*x, last, keep) + eps) (the same spellings as above)
// [* gamma[H]] [+ beta[H]] => RmsNorm; with x = Cast(x0 -> f32) and the result cast back to
// x0's dtype before gamma (Llama exports), the norm runs on x0.
Graph fuse_rms_norm(const Graph& g, const PassContext& ctx = {});
// MatMul(q, kT) [* c | / c, c a scalar Constant] [+ mask | Where(causal, s, -inf)]
// -> Softmax(last axis) -> MatMul(p, v), with q (.., H, Sq, D) rank 4 or (N, Sq, D) rank 3
// => Attention (BHSD; BSHD when q, k and v come from (B, S, H, D) through transposes),
// score_scale = c or 1/c (1 without a scale), mask none / causal (a constant triangular mask)
// / bias (any other additive mask that broadcasts to the scores without growing them).
Graph fuse_attention(const Graph& g, const PassContext& ctx = {});

}  // namespace rlx::passes
