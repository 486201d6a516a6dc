#pragma once
// Compiling GLSL compute shaders to Vulkan SPIR-V in tests (the Vulkan backend's glslang
// compiler, then the SPIR-V validator of SPIRV-Tools), available in builds with both.
#include <string>

namespace rlx::testing {

bool have_glsl_compiler();
// Why the GLSL tests skip (the packages to install).
std::string no_glsl_compiler_reason();
// Compiles `source` as a compute shader for Vulkan 1.2 and validates the SPIR-V; on failure
// `error` holds the compiler's or validator's message.
bool glsl_compiles_to_valid_spirv(const std::string& source, std::string* error);

}  // namespace rlx::testing
