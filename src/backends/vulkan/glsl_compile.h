#pragma once
// GLSL compute shaders -> SPIR-V for Vulkan 1.2 (glslang, linked statically), cached in memory and
// on disk (runtime/disk_cache.h, folder "vulkan"). Compile errors are rlx::Error naming the
// kernel, with the compiler's log and the numbered source.
#include <cstdint>
#include <string>
#include <vector>

namespace rlx::vulkan {

struct ShaderCacheStats {
  uint64_t compiled = 0;     // glslang compilations in this process
  uint64_t disk_hits = 0;    // SPIR-V read from the disk cache
  uint64_t memory_hits = 0;
};

// The SPIR-V words of `source` (a compute shader), compiled once per process.
const std::vector<uint32_t>& spirv_for(const std::string& name, const std::string& source);
ShaderCacheStats shader_cache_stats();

// Compiles without any cache (the codegen tests); on failure returns false with `error` set.
bool compile_glsl(const std::string& source, std::vector<uint32_t>* words, std::string* error);

}  // namespace rlx::vulkan
