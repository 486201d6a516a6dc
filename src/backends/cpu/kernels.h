#pragma once
// CPU kernels: one overload of `kernel` per op kind. The executor places every output
// (contiguous, row-major, concrete shape, dtype from inference) as the memory plan says before
// calling; an output may share the bytes of an input only when the plan marked the step in
// place (elementwise kernels that read element i before writing it). Kernels whose geometry
// the plan resolves (ctx.step.geom) take it from there rather than recomputing it.
// Kernels read ctx.in, write ctx.out, and throw rlx::Error on bad runtime data
// (out-of-range indices, ...). f16/bf16 compute in f32 and round on store.
// Each op family lives in its own file: kernels_<family>.cpp.
#include <functional>
#include <span>
#include <vector>

#include "plan/schedule.h"
#include "rlx/graph.h"
#include "rlx/tensor.h"

namespace rlx::cpu {

class ConvEpilogue;

// Runs a subgraph (If/While bodies) with the given inputs bound to its Input nodes in
// node order; returns its outputs.
using SubgraphRunner = std::function<std::vector<Tensor>(const Graph&, const std::vector<Tensor>&)>;

// A kernel's derived form of a step operand that stays fixed across runs (a conv's weights
// converted to f32, their packed panels). Valid while `generation` equals the run's params
// generation and `source` the operand's address: a Param changes only through set_param (a new
// generation), a Constant never.
template <class T> struct Derived {
  std::vector<T> data;
  uint64_t generation = 0;
  const void* source = nullptr;
  int64_t layout = 0;  // which form the kernel built (e.g. the packed panels' width)
  bool valid = false;
  // Whether `data` holds form `form` of `src` for this generation; else marks it as being
  // rebuilt (the caller then rebuilds it).
  bool fresh(const void* src, uint64_t gen, int64_t form = 0) {
    if (valid && source == src && generation == gen && layout == form) return true;
    valid = true;
    source = src;
    generation = gen;
    layout = form;
    return false;
  }
};

using DerivedOperand = Derived<float>;

// What a step's kernel keeps across runs, owned by the executor (one per step that has one).
struct StepCache {
  DerivedOperand weights;  // the weight operand in f32 (when stored in another dtype)
  DerivedOperand packed;   // the weights packed for a tile kernel
  Derived<uint8_t> quant;  // DequantMatMul: the weight in the packed 8-row layout (quant_pack.h)
};

struct KernelContext {
  const Node& node;
  std::span<const Tensor> in;   // input tensors, contiguous
  std::span<Tensor> out;        // preallocated outputs, contiguous
  const SubgraphRunner& run_subgraph;
  const plan::Step& step;       // the node's step: operand locations and resolved geometry
  const Limits& limits;         // the compile's size policy (While iteration cap, ...)
  // Conv only: the fused consumer step (conv_epilogue.h) its results go through, or null.
  const ConvEpilogue* epilogue = nullptr;
  // Conv and DequantMatMul: the step's cache when its weight operand (input 1) is a Param or a
  // Constant (null otherwise; DequantMatMul: also when the cpu_pack_quant knob is off), and the
  // run's params generation.
  StepCache* weight_cache = nullptr;
  uint64_t params_generation = 0;
};

#define RLX_CPU_KERNEL(T) void kernel(const ops::T& op, KernelContext& ctx);
// elementwise (kernels_elementwise.cpp)
RLX_CPU_KERNEL(Binary) RLX_CPU_KERNEL(Compare) RLX_CPU_KERNEL(Where) RLX_CPU_KERNEL(Activation)
RLX_CPU_KERNEL(Cast) RLX_CPU_KERNEL(ElementwiseRegion)
// shape (kernels_shape.cpp)
RLX_CPU_KERNEL(Reshape) RLX_CPU_KERNEL(Transpose) RLX_CPU_KERNEL(Narrow) RLX_CPU_KERNEL(Concat)
RLX_CPU_KERNEL(Expand) RLX_CPU_KERNEL(Reverse) RLX_CPU_KERNEL(StopGradient)
// indexing (kernels_indexing.cpp)
RLX_CPU_KERNEL(Gather) RLX_CPU_KERNEL(ScatterAdd) RLX_CPU_KERNEL(ArgMax) RLX_CPU_KERNEL(ArgMin)
RLX_CPU_KERNEL(TopK) RLX_CPU_KERNEL(Cumsum)
// KV cache (kernels_cache.cpp)
RLX_CPU_KERNEL(CacheWrite)
// reductions (kernels_reduce.cpp)
RLX_CPU_KERNEL(Reduce) RLX_CPU_KERNEL(Softmax) RLX_CPU_KERNEL(LogSoftmax)
// contraction (kernels_matmul.cpp)
RLX_CPU_KERNEL(MatMul) RLX_CPU_KERNEL(DotGeneral) RLX_CPU_KERNEL(FusedMatMulBiasAct)
RLX_CPU_KERNEL(LoraMatMul) RLX_CPU_KERNEL(GroupedMatMul)
// quantized weights (kernels_quant.cpp)
RLX_CPU_KERNEL(DequantMatMul)
// exact integer products of 8-bit operands (kernels_integer.cpp)
RLX_CPU_KERNEL(MatMulInteger) RLX_CPU_KERNEL(ConvInteger)
// norms (kernels_norm.cpp)
RLX_CPU_KERNEL(LayerNorm) RLX_CPU_KERNEL(RmsNorm) RLX_CPU_KERNEL(GroupNorm) RLX_CPU_KERNEL(LayerNorm2d)
RLX_CPU_KERNEL(BatchNormInference) RLX_CPU_KERNEL(FusedResidualLN) RLX_CPU_KERNEL(FusedResidualRmsNorm)
// transformer (kernels_attention.cpp, kernels_transformer.cpp)
RLX_CPU_KERNEL(Rope) RLX_CPU_KERNEL(Attention) RLX_CPU_KERNEL(FusedSwiGLU)
RLX_CPU_KERNEL(FusedAttentionBlock) RLX_CPU_KERNEL(FusedTransformerLayer)
// vision (kernels_conv.cpp, kernels_pool.cpp, kernels_resize_pad.cpp)
RLX_CPU_KERNEL(Conv) RLX_CPU_KERNEL(ConvTranspose) RLX_CPU_KERNEL(Pool) RLX_CPU_KERNEL(Resize)
RLX_CPU_KERNEL(Pad) RLX_CPU_KERNEL(Im2Col)
// random (kernels_random.cpp)
RLX_CPU_KERNEL(RngUniform) RLX_CPU_KERNEL(RngNormal) RLX_CPU_KERNEL(Sample)
// control flow (kernels_control.cpp)
RLX_CPU_KERNEL(If) RLX_CPU_KERNEL(While)
// sequence (kernels_recurrent.cpp)
RLX_CPU_KERNEL(Recurrent)
#undef RLX_CPU_KERNEL

}  // namespace rlx::cpu
