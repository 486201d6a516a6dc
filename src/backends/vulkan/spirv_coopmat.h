#pragma once
// SPIR-V of NV cooperative matrices rewritten as KHR cooperative matrices with bf16 A/B operands.
//
// Debian 12's glslang (12.0) spells only GL_NV_cooperative_matrix, whose matrices take f16 but no
// bf16 components. VK_KHR_cooperative_matrix with VK_KHR_shader_bfloat16 takes bf16 A and B
// matrices (NVIDIA's tensor cores since Ampere), but no GLSL compiler in Debian 12 can write them.
// So the bf16 kernels are written against the NV extension with f16 placeholders and rewritten
// after glslang: every OpTypeCooperativeMatrixNV becomes an OpTypeCooperativeMatrixKHR whose Use
// (A, B or accumulator) is read off the matrix products that take it, the A and B types get the
// component type `OpTypeFloat 16 BFloat16KHR`, loads / stores / products / lengths take their KHR
// opcodes (the NV column-major flag becomes the KHR layout operand), and the capabilities and
// extensions follow. The A/B data must reach the matrices as raw bf16 bits (loads from memory of
// any element type, products); nothing may compute on them as f16.
//
// A kernel asks for the rewrite by starting its GLSL with kKhrBf16Directive (spirv_for in
// glsl_compile.cpp applies it after compiling; the SPIR-V cache holds the rewritten words). Its
// A and B matrices must be distinct GLSL types (e.g. B's dimensions through a specialization
// constant of the same value, kCoopmatBTypeDecl), since one type takes one Use.
#include <cstdint>
#include <string>
#include <vector>

namespace rlx::vulkan {

inline constexpr const char* kKhrBf16Directive = "// rlx-spirv: khr-cooperative-matrix bf16-operands\n";

// A GLSL declaration giving the B operand's matrix type its own dimensions ids: CM_B16 is 16 (a
// specialization constant nobody sets), so `fcoopmatNV<16, gl_ScopeSubgroup, CM_B16, CM_B16>`
// is a different SPIR-V type from the A operand's `fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>`.
inline constexpr const char* kCoopmatBTypeDecl = "layout(constant_id = 901) const uint CM_B16 = 16u;\n";

// True when `source` asks for the rewrite.
bool wants_khr_bf16(const std::string& source);

// The rewritten module; rlx::Error naming `name` when the module is not what the rewrite expects
// (a matrix type used in two roles, a bf16 matrix built from f16 values, no 32-bit uint type, a
// non-constant column-major flag).
std::vector<uint32_t> coopmat_nv_to_khr_bf16(const std::vector<uint32_t>& words, const std::string& name);

}  // namespace rlx::vulkan
