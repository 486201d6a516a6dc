#pragma once
// Claim checks that the shader-language GPU backends (Vulkan / GLSL, WebGPU / WGSL) share: each
// takes the backend's codegen::Language and its name (for messages) and says whether the backend
// runs a node as is; a backend's claims call them and add its own device / dtype checks.
#include <string>
#include <string_view>

#include <optional>
#include <vector>

#include "codegen/elementwise.h"
#include "codegen/language.h"
#include "plan/schedule.h"
#include "rlx/graph.h"

namespace rlx::plan {

// "node 12 (matmul)": how the GPU lowerings name a step in their errors.
std::string step_node_label(const Step& st);
// Sets *why (when given) to `msg` and returns false: a claim's refusal.
bool claim_refuse(std::string* why, const std::string& msg);

// Elementwise family: the op kinds, and whether `lang` can spell the node's one-step chain for
// its input dtypes (codegen::chain_supported; *why, when given, says what is missing).
bool elementwise_claims_kind(std::string_view op_name);
bool elementwise_claims_node(const codegen::Language& lang, const Graph& g, const Node& n, std::string* why);

// Matmul family (MatMul, FusedMatMulBiasAct, GroupedMatMul): the op kinds, and the dtype / rank
// checks and the fused epilogue's chain in `lang`; `backend` ("Vulkan") starts each refusal.
bool matmul_claims_kind(std::string_view op_name);
bool matmul_claims_node(const codegen::Language& lang, std::string_view backend, const Graph& g, const Node& n,
                        std::string* why);

// The dtype the matmul epilogue computes in (the f32 accumulator for f16 / bf16, else t), and
// its input dtypes: the product, then the bias and the residual when present.
DType matmul_epilogue_dtype(DType t);
std::vector<DType> matmul_epilogue_inputs(DType t, bool bias, bool residual);
// The dtypes the matmul kernels multiply: floats and integers.
bool matmul_product_dtype(DType t);
// The matmul epilogue (bias add, activation, residual add) of a product in `t` as an elementwise
// chain over x0 = the product and the bias / residual, with its dtypes; no steps for none.
codegen::ElementwisePlan matmul_epilogue_plan(DType t, bool bias, std::optional<ActKind> act, bool residual);

// codegen::plan_elementwise (no vectors) of a kernel that indexes with 32 bits: rlx::Error
// starting with `what` when the tensor needs wide indices (`backend` names whose kernel).
codegen::ElementwisePlan elementwise_plan_32(const std::vector<RegionStep>& steps, const std::vector<DType>& in_dtypes,
                                             DType out_dtype, const ElementwiseGeom& geom, const std::string& what,
                                             std::string_view backend);

}  // namespace rlx::plan
