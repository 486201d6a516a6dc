#pragma once
// Which weights (Params and Constants) the WebGPU backend holds as packed 16-bit values (two
// per 32-bit word, element 2i in the low half: the host tensor's bytes as they are) instead of
// one f32 word each.
//
// A weight of dtype f16 or bf16 is packed when every node reading it (through views: Reshape,
// StopGradient, a contiguous Narrow) is a kernel that unpacks it: the A or B operand of MatMul /
// FusedMatMulBiasAct (the GEMM and GEMV kernels), the weights of GroupedMatMul, or the table of
// a Gather (an embedding: rows widened to f32 words as they are copied); by default (PackWeights::Gemv)
// only when one of them is a GEMV-sized product (at most 4 static rows of x) or a Gather: the GEMM
// kernels unpack more slowly than they read f32 words, so weights only GEMMs read stay in words
// unless PackWeights::All asks for half the memory. A weight that
// anything else reads (an elementwise op, a norm, a copy, a graph output) keeps f32 words, so no
// kernel ever meets a layout it does not read; the lowering checks this again per dispatch
// (LowerContext::dispatch refuses a packed operand of a kernel that does not unpack it). The list
// goes to the memory plan as PlanOptions::native_weights; the runtime then uploads such a weight's
// bytes unconverted (its storage dtype is its dtype).
#include <vector>

#include "plan/memory_plan.h"
#include "rlx/graph.h"

namespace rlx::webgpu {

// True when input `j` of node `n` is read by a WebGPU kernel that unpacks 16-bit values.
bool reads_packed(const Node& n, size_t j);

// Which weights to pack (knob webgpu_packed_weights: 0 Off, 1 All, auto Gemv).
enum class PackWeights { Off, Gemv, All };

// The weights of `g` to hold packed under `plan` (whose device storage maps f16/bf16 to f32):
// with Gemv those some GEMV or Gather reads, with All any whose readers all unpack; none with Off.
std::vector<NodeId> packed_weights(const Graph& g, const plan::PlanOptions& plan, PackWeights mode);

}  // namespace rlx::webgpu
