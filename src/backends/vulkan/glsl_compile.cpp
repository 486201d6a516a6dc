#include "backends/vulkan/glsl_compile.h"

#include <glslang/Include/glslang_c_interface.h>
#include <glslang/Public/resource_limits_c.h>

#include <memory>
#include <mutex>
#include <cstring>
#include <sstream>
#include <unordered_map>

#include "backends/vulkan/spirv_coopmat.h"
#include "rlx/error.h"
#include "runtime/disk_cache.h"

namespace rlx::vulkan {
namespace {

struct Cache {
  std::mutex mu;
  std::unordered_map<std::string, std::unique_ptr<std::vector<uint32_t>>> by_key;
  ShaderCacheStats stats;
};

Cache& cache() {
  static Cache c;
  return c;
}

std::string numbered(const std::string& source) {
  std::istringstream in(source);
  std::ostringstream out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) out << n << ": " << line << "\n";
  return out.str();
}

}  // namespace

bool compile_glsl(const std::string& source, std::vector<uint32_t>* words, std::string* error) {
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
  words->resize(glslang_program_SPIRV_get_size(program.get()));
  glslang_program_SPIRV_get(program.get(), words->data());
  return true;
}

const std::vector<uint32_t>& spirv_for(const std::string& name, const std::string& source) {
  static const std::string dir = kernel_cache_dir("vulkan");
  const std::string key = hex64(fnv1a64(source)) + "-glslang-vk12";
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  if (auto it = c.by_key.find(key); it != c.by_key.end()) {
    ++c.stats.memory_hits;
    return *it->second;
  }
  auto words = std::make_unique<std::vector<uint32_t>>();
  const std::vector<char> bytes = disk_cache_load(dir, key, ".spv", source);
  if (!bytes.empty() && bytes.size() % 4 == 0) {
    words->resize(bytes.size() / 4);
    std::memcpy(words->data(), bytes.data(), bytes.size());
    ++c.stats.disk_hits;
  } else {
    std::string log;
    if (!compile_glsl(source, words.get(), &log))
      throw Error("Vulkan: the GLSL kernel '" + name + "' does not compile (an rlx bug; please report it):\n" + log +
                  "\n" + numbered(source));
    if (const KhrRewrite r = khr_rewrite_of(source); r != KhrRewrite::None)
      *words = coopmat_nv_to_khr(*words, name, r == KhrRewrite::Bf16);
    ++c.stats.compiled;
    std::vector<char> out(words->size() * 4);
    std::memcpy(out.data(), words->data(), out.size());
    disk_cache_store(dir, key, ".spv", source, out);
  }
  return *c.by_key.emplace(key, std::move(words)).first->second;
}

ShaderCacheStats shader_cache_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

}  // namespace rlx::vulkan
