#pragma once
// The on-disk kernel cache every backend uses for compiled kernels (CUDA cubins, Vulkan SPIR-V):
// files under $RLX_CACHE_DIR/<backend> (else $XDG_CACHE_HOME/rlx, else ~/.cache/rlx;
// RLX_CACHE_DIR=off disables it). Each entry is stored with its source beside it, and a load
// compares the source, so a hash collision or a stale file is recompiled, never run.
// Writes go through a temporary file and a rename: concurrent processes never read half a file.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rlx {

uint64_t fnv1a64(std::string_view s, uint64_t h = 14695981039346656037ull);
std::string hex64(uint64_t v);

// The cache folder of backend `sub` ("cuda", "vulkan"); "" when the disk cache is off.
std::string kernel_cache_dir(const std::string& sub);

// The bytes of entry `key` in `dir` when its stored source equals `source`, else empty.
std::vector<char> disk_cache_load(const std::string& dir, const std::string& key, const std::string& ext,
                                  const std::string& source);
// Stores entry `key` (an unwritable folder only costs recompilation later).
void disk_cache_store(const std::string& dir, const std::string& key, const std::string& ext, const std::string& source,
                      const std::vector<char>& bytes);

}  // namespace rlx
