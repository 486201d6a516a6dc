#include "support/shader_compile.h"

#if defined(RLX_HAVE_GLSLANG) && defined(RLX_HAVE_VULKAN)
#include <spirv-tools/libspirv.hpp>
#include <vector>

#include "backends/vulkan/glsl_compile.h"
#endif

namespace rlx::testing {

#if defined(RLX_HAVE_GLSLANG) && defined(RLX_HAVE_VULKAN)
bool have_glsl_compiler() { return true; }
std::string no_glsl_compiler_reason() { return ""; }

bool glsl_compiles_to_valid_spirv(const std::string& source, std::string* error) {
  std::vector<uint32_t> words;
  if (!vulkan::compile_glsl(source, &words, error)) return false;
  spvtools::SpirvTools tools(SPV_ENV_VULKAN_1_2);
  std::string messages;
  tools.SetMessageConsumer([&](spv_message_level_t, const char*, const spv_position_t& pos, const char* m) {
    messages += "word " + std::to_string(pos.index) + ": " + m + "\n";
  });
  if (!tools.Validate(words)) {
    if (error) *error = "SPIR-V validation failed:\n" + messages;
    return false;
  }
  return true;
}
#else
bool have_glsl_compiler() { return false; }
std::string no_glsl_compiler_reason() {
  return "this build has no Vulkan backend (its GLSL compiler) or no SPIRV-Tools (scripts/install-deps.sh installs "
         "libvulkan-dev, glslang-dev and spirv-tools)";
}
bool glsl_compiles_to_valid_spirv(const std::string&, std::string* error) {
  if (error) *error = no_glsl_compiler_reason();
  return false;
}
#endif

}  // namespace rlx::testing
