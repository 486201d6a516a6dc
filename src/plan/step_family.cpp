// The op kind -> StepFamily table (see step_family.h).
#include "plan/step_family.h"

#include <type_traits>
#include <utility>
#include <variant>

namespace rlx::plan {
namespace {

template <class T, class... U>
constexpr bool is_one_of = (std::is_same_v<T, U> || ...);

template <class T>
constexpr StepFamily family_of() {
  using namespace ops;
  if constexpr (is_one_of<T, Input, Param, Constant>) return StepFamily::Leaf;
  else if constexpr (is_one_of<T, Binary, Compare, Where, Activation, Cast, ElementwiseRegion>)
    return StepFamily::Elementwise;
  else if constexpr (is_one_of<T, MatMul, FusedMatMulBiasAct, LoraMatMul, DotGeneral, GroupedMatMul, DequantMatMul,
                               MatMulInteger>)
    return StepFamily::Matmul;
  else if constexpr (is_one_of<T, Softmax, LogSoftmax, Reduce, LayerNorm, RmsNorm, FusedResidualLN,
                               FusedResidualRmsNorm, FusedSwiGLU, GroupNorm, LayerNorm2d, BatchNormInference>)
    return StepFamily::Rows;
  else if constexpr (is_one_of<T, Reshape, StopGradient, Transpose, Narrow, Concat, Expand, Reverse, Gather, Pad>)
    return StepFamily::Copy;
  else if constexpr (is_one_of<T, Rope>) return StepFamily::Rope;
  else if constexpr (is_one_of<T, Attention, FusedAttentionBlock, FusedTransformerLayer>) return StepFamily::Attention;
  else if constexpr (is_one_of<T, ArgMax, ArgMin, TopK, Sample>) return StepFamily::Select;
  else if constexpr (is_one_of<T, Cumsum>) return StepFamily::Scan;
  else if constexpr (is_one_of<T, ScatterAdd, CacheWrite>) return StepFamily::Scatter;
  else if constexpr (is_one_of<T, RngUniform, RngNormal>) return StepFamily::Random;
  else if constexpr (is_one_of<T, Conv, ConvInteger, ConvTranspose, Pool, Im2Col, Resize>) return StepFamily::Spatial;
  else if constexpr (is_one_of<T, If, While, Recurrent>) return StepFamily::Control;
  else static_assert(!sizeof(T), "every op kind needs a StepFamily");
}

template <size_t... I>
std::optional<StepFamily> family_by_name(std::string_view name, std::index_sequence<I...>) {
  std::optional<StepFamily> f;
  ((name == std::variant_alternative_t<I, Op>::kName ? (void)(f = family_of<std::variant_alternative_t<I, Op>>())
                                                     : (void)0),
   ...);
  return f;
}

}  // namespace

StepFamily step_family(const Op& op) {
  return std::visit([](const auto& o) { return family_of<std::decay_t<decltype(o)>>(); }, op);
}

std::optional<StepFamily> step_family(std::string_view op_name) {
  return family_by_name(op_name, std::make_index_sequence<std::variant_size_v<Op>>{});
}

const char* family_name(StepFamily f) {
  switch (f) {
    case StepFamily::Leaf: return "leaf";
    case StepFamily::Elementwise: return "elementwise";
    case StepFamily::Matmul: return "matmul";
    case StepFamily::Rows: return "rows";
    case StepFamily::Copy: return "copy";
    case StepFamily::Rope: return "rope";
    case StepFamily::Attention: return "attention";
    case StepFamily::Select: return "select";
    case StepFamily::Scan: return "scan";
    case StepFamily::Scatter: return "scatter";
    case StepFamily::Random: return "random";
    case StepFamily::Spatial: return "spatial";
    case StepFamily::Control: return "control";
  }
  return "?";
}

}  // namespace rlx::plan
