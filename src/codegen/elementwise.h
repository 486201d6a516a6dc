#pragma once
// The kernel plan of an elementwise chain (Binary, Compare, Where, Activation, Cast,
// ElementwiseRegion, and the epilogues of matmul kernels), decided once for every language:
// each step's dtype, how each input is read (the output's contiguous layout, one broadcast
// element, or broadcast strides over the coalesced output dims), the vector width, whether
// indices need 64 bits, and whether the chain reports errors through the run's flag.
//
// A printer per language turns the plan into a kernel (print_cuda_elementwise,
// print_glsl_elementwise, print_wgsl_elementwise); the chain's statements come from one
// shared builder (`chain_code`) over the language's spelling (codegen/language.h).
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "codegen/language.h"
#include "plan/schedule.h"
#include "rlx/ops.h"

namespace rlx::codegen {

enum class InputAccess : uint8_t { Contiguous, Scalar, Strided };

struct ElementwisePlan {
  std::vector<RegionStep> steps;
  std::vector<DType> in_dtypes;
  std::vector<DType> step_dtypes;  // result dtype of every step; the last is the output's
  DType out_dtype = DType::F32;
  std::vector<int64_t> out_dims;                  // coalesced output index space
  std::vector<std::vector<int64_t>> in_strides;   // per input, element strides over out_dims
  std::vector<InputAccess> access;                // per input
  bool dense = true;         // every input Contiguous or Scalar (vector loads possible)
  int vec = 1;               // elements per work item
  int64_t numel = 0;
  int64_t items = 0;         // work items: numel / vec
  bool wide_index = false;   // some element index or offset reaches 2^31
  bool error_flag = false;   // the chain reports errors (integer Div/Mod/FMod/Pow)
};

// A matmul epilogue (FusedMatMulBiasAct) as a chain over x0 = the product, then the bias (when
// `bias`) and the residual (when `residual`) as the next inputs: bias add, activation, residual add.
std::vector<RegionStep> matmul_epilogue_chain(bool bias, std::optional<ActKind> act, bool residual);

// The op of a single elementwise node as a one-step chain over inputs 0..n-1.
std::vector<RegionStep> single_step_chain(const Op& op);

// Result dtype of every step (rlx::Error for a reference to a missing input or a later step).
std::vector<DType> chain_step_dtypes(const std::vector<RegionStep>& steps, const std::vector<DType>& in_dtypes);

// True when `lang` can run the chain for these input dtypes: every dtype held, every step
// spelled, every math function available; `why` says what is missing otherwise.
bool chain_supported(const Language& lang, const std::vector<RegionStep>& steps, const std::vector<DType>& in_dtypes,
                     std::string* why = nullptr);

// Plans the chain over `geom`; `max_vec` is the largest vector width (elements) the operands'
// alignment and the language allow (1 = none). rlx::Error when the chain's result dtype is not
// `out_dtype`.
ElementwisePlan plan_elementwise(const std::vector<RegionStep>& steps, const std::vector<DType>& in_dtypes,
                                 DType out_dtype, const plan::ElementwiseGeom& geom, int max_vec);

// The statements computing the chain from compute-typed input expressions `inputs[k]`: one
// `<decl> v<s> = <expr>;` line per step (`decl(type, name)` spells the declaration, e.g.
// "const float v0" or "let v0"); `result` names the last value. Helpers the expressions call
// are added to `helpers`. rlx::Error when the language cannot spell a step.
struct ChainCode {
  std::vector<std::string> lines;
  std::string result;
};
using DeclFn = std::string (*)(const std::string& type, const std::string& name);
ChainCode chain_code(const Language& lang, const ElementwisePlan& plan, const std::vector<std::string>& inputs,
                     DeclFn decl, Helpers& helpers);

// ---- printers ----

// CUDA: the `extern "C" __global__ void rlx_elementwise(out, in0.., [err])` kernel body; the
// backend prepends its prelude and elementwise helpers. `early_dependents`: the kernel lets the
// next launch start before its own programmatic-launch wait.
std::string print_cuda_elementwise(const ElementwisePlan& plan, bool early_dependents);

// GLSL 4.5 compute shader `main`, workgroup 256, grid-stride over items. Bindings (set 0):
// 0 = output, 1 + k = input k (each a buffer of its storage type; bindings may alias one
// buffer), 1 + n = the error flag (`int`, written with atomicMax) when plan.error_flag. Push
// constants: one uint element offset per binding (output first), added to every index, so a
// binding may start below the tensor at an aligned offset. 32-bit indices (rlx::Error when
// plan.wide_index).
std::string print_glsl_elementwise(const ElementwisePlan& plan);
// The `#extension` lines a GLSL 4.5 kernel needs to hold and compute these logical dtypes
// (8/16/64-bit types; bf16 is held as uint16_t). Kernel templates of the Vulkan backend use it.
std::string glsl_extensions(const std::set<DType>& dtypes);

// WGSL compute shader `main`, workgroup 256, grid-stride over items. Every tensor is an
// array<u32> binding (one word per element, see lang_wgsl.cpp); `binding_of[k]` (size
// n_inputs + 1, output first) gives the binding of each operand, so operands that share a
// GPU buffer use one binding (WebGPU forbids binding a written buffer twice); empty means
// operand k uses binding k. The error flag (atomic<i32>) and then the uniform offsets
// (one u32 per operand, output first) take the next two bindings. rlx::Error when
// plan.wide_index or a dtype cannot be held.
std::string print_wgsl_elementwise(const ElementwisePlan& plan, const std::vector<int>& binding_of = {});
// Whether the WGSL kernel of `plan` has the error-flag binding: plan.error_flag, or i64 Add/Sub/
// Mul/Pow steps (i64 is held in 32-bit words; a result beyond them is reported, not wrapped).
bool wgsl_error_flag(const ElementwisePlan& plan);

}  // namespace rlx::codegen
