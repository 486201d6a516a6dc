#pragma once
// SPIR-V of NV cooperative matrices rewritten as KHR cooperative matrices, optionally with bf16
// A/B operands.
//
// Debian 12's glslang (12.0) spells only GL_NV_cooperative_matrix, whose matrices take f16 but no
// bf16 components. VK_KHR_cooperative_matrix (with VK_KHR_shader_bfloat16: bf16 A and B matrices)
// is what current drivers optimize (NVIDIA's: the same f16 GEMM runs 15% faster as KHR than as NV
// on an H200), but no GLSL compiler in Debian 12 can write it. So the kernels are written against
// the NV extension and rewritten after glslang: every OpTypeCooperativeMatrixNV becomes an
// OpTypeCooperativeMatrixKHR whose Use (A, B or accumulator) is read off the matrix products that
// take it, loads / stores / products / lengths take their KHR opcodes (the NV column-major flag
// becomes the KHR layout operand), and the capabilities and extensions follow. With bf16 operands
// the A and B types get the component type `OpTypeFloat 16 BFloat16KHR` (the f16 placeholders of
// the GLSL): their data must reach the matrices as raw bf16 bits (loads from memory of any element
// type, conversions from f32 accumulators); nothing may compute on them or read their components.
//
// A kernel asks for the rewrite by starting its GLSL with kKhrDirective or kKhrBf16Directive
// (spirv_for in glsl_compile.cpp applies it after compiling; the SPIR-V cache holds the rewritten
// words). Its A and B matrices must be distinct GLSL types (B's dimensions through the
// specialization constant of kCoopmatBTypeDecl), since one type takes one Use.
#include <cstdint>
#include <string>
#include <vector>

namespace rlx::vulkan {

inline constexpr const char* kKhrDirective = "// rlx-spirv: khr-cooperative-matrix\n";
inline constexpr const char* kKhrBf16Directive = "// rlx-spirv: khr-cooperative-matrix bf16-operands\n";

// A GLSL declaration giving the B operand's matrix type its own dimensions ids: CM_B16 is 16 (a
// specialization constant nobody sets), so `fcoopmatNV<16, gl_ScopeSubgroup, CM_B16, CM_B16>`
// is a different SPIR-V type from the A operand's `fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>`.
inline constexpr const char* kCoopmatBTypeDecl = "layout(constant_id = 901) const uint CM_B16 = 16u;\n";

enum class KhrRewrite { None, F16, Bf16 };
// The rewrite `source` asks for (its first line).
KhrRewrite khr_rewrite_of(const std::string& source);

// The rewritten module (bf16 A / B components when `bf16_operands`); rlx::Error naming `name`
// when the module is not what the rewrite expects (a matrix type used in two roles or in no
// product, no 32-bit uint type, a non-constant column-major flag; with bf16 operands also an A / B
// matrix computed or built from f16 values, or a component of one read).
std::vector<uint32_t> coopmat_nv_to_khr(const std::vector<uint32_t>& words, const std::string& name, bool bf16_operands);

}  // namespace rlx::vulkan
