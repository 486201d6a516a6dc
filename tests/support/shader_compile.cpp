#include "support/shader_compile.h"

#ifdef RLX_HAVE_GLSLANG
#include <glslang/Include/glslang_c_interface.h>
#include <glslang/Public/resource_limits_c.h>

#include <memory>
#include <mutex>
#include <spirv-tools/libspirv.hpp>
#include <vector>
#endif

namespace rlx::testing {

#ifdef RLX_HAVE_GLSLANG
bool have_glsl_compiler() { return true; }
std::string no_glsl_compiler_reason() { return ""; }

bool glsl_compiles_to_valid_spirv(const std::string& source, std::string* error) {
  static std::once_flag init;
  std::call_once(init, [] { glslang_initialize_process(); });
  glslang_input_t in{};
  in.language = GLSLANG_SOURCE_GLSL;
  in.stage = GLSLANG_STAGE_COMPUTE;
  in.client = GLSLANG_CLIENT_VULKAN;
  in.client_version = GLSLANG_TARGET_VULKAN_1_2;
  in.target_language = GLSLANG_TARGET_SPV;
  in.target_language_version = GLSLANG_TARGET_SPV_1_5;
  in.code = source.c_str();
  in.default_version = 450;
  in.default_profile = GLSLANG_NO_PROFILE;
  in.messages = static_cast<glslang_messages_t>(GLSLANG_MSG_SPV_RULES_BIT | GLSLANG_MSG_VULKAN_RULES_BIT);
  in.resource = glslang_default_resource();
  std::unique_ptr<glslang_shader_t, void (*)(glslang_shader_t*)> shader(glslang_shader_create(&in), glslang_shader_delete);
  if (!glslang_shader_preprocess(shader.get(), &in) || !glslang_shader_parse(shader.get(), &in)) {
    if (error) *error = glslang_shader_get_info_log(shader.get());
    return false;
  }
  std::unique_ptr<glslang_program_t, void (*)(glslang_program_t*)> program(glslang_program_create(),
                                                                          glslang_program_delete);
  glslang_program_add_shader(program.get(), shader.get());
  if (!glslang_program_link(program.get(), in.messages)) {
    if (error) *error = glslang_program_get_info_log(program.get());
    return false;
  }
  glslang_program_SPIRV_generate(program.get(), GLSLANG_STAGE_COMPUTE);
  std::vector<uint32_t> words(glslang_program_SPIRV_get_size(program.get()));
  glslang_program_SPIRV_get(program.get(), words.data());
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
  return "this build has no glslang / SPIRV-Tools (scripts/install-deps.sh installs glslang-dev and spirv-tools)";
}
bool glsl_compiles_to_valid_spirv(const std::string&, std::string* error) {
  if (error) *error = no_glsl_compiler_reason();
  return false;
}
#endif

}  // namespace rlx::testing
