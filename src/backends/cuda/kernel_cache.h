#pragma once
// NVRTC kernel cache: CUDA C++ source strings compiled for the device's architecture, cached in
// memory (per process) and on disk (per machine) so a second process does not recompile.
//
// One module per distinct source (all its kernels); disk key: FNV-1a 64 of the source + the
// arch + the NVRTC version (the source is stored beside the cubin and compared on load);
// directory $RLX_CACHE_DIR, else $XDG_CACHE_HOME/rlx, else ~/.cache/rlx (set RLX_CACHE_DIR=off
// to disable the disk cache). Compile failures raise rlx::Error naming the kernel, with the log.
#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>
#include <vector>

namespace rlx::cuda {

struct KernelCacheStats {
  uint64_t compiled = 0;    // NVRTC compilations in this process
  uint64_t disk_hits = 0;   // modules loaded from the disk cache
  uint64_t memory_hits = 0;
};

// Compiles `source` to a cubin for `arch` (e.g. "sm_90") with NVRTC; needs no GPU. Errors name
// `entry` and carry the compiler log. `fast_compile` trades the code's speed for compile time
// (about 2.5x faster; ptxas still checks the inline assembly): for checks that a source compiles.
std::vector<char> nvrtc_compile(const std::string& entry, const std::string& source, const std::string& arch,
                                bool fast_compile = false);

// Returns the `extern "C"` function `entry` of `source` (compiled once per process) for the
// device's architecture, or for `arch` when given (e.g. "sm_90a" for kernels using wgmma,
// which only runs on that exact architecture).
CUfunction get_kernel(const std::string& entry, const std::string& source, const std::string& arch = "");
// Directory of the disk cache ("" when disabled).
std::string kernel_cache_dir();
KernelCacheStats kernel_cache_stats();
// Forgets the in-memory cache (loaded modules stay loaded); the next get_kernel of a source
// loads it from disk. For tests of the disk cache.
void kernel_cache_forget_memory();

}  // namespace rlx::cuda
