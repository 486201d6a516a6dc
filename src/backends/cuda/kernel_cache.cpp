#include "backends/cuda/kernel_cache.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "backends/cuda/cuda_libs.h"
#include "backends/cuda/device.h"
#include "backends/cuda/status.h"
#include "rlx/error.h"
#include "runtime/disk_cache.h"
#include "runtime/knobs.h"

namespace rlx::cuda {
namespace {

struct Cache {
  std::mutex mu;
  std::unordered_map<std::string, CUmodule> by_source;     // by source key; loaded for the process lifetime
  std::unordered_map<std::string, CUfunction> functions;  // by source key + ":" + entry
  KernelCacheStats stats;
};

Cache& cache() {
  static Cache c;
  return c;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  RLX_NVRTC_CHECK(nvrtc().nvrtcVersion(&major, &minor));
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace

std::vector<char> nvrtc_compile(const std::string& entry, const std::string& source, const std::string& arch,
                                bool fast_compile) {
  nvrtcProgram prog = nullptr;
  RLX_NVRTC_CHECK(nvrtc().nvrtcCreateProgram(&prog, source.c_str(), (entry + ".cu").c_str(), 0, nullptr, nullptr));
  struct Guard {
    nvrtcProgram& p;
    ~Guard() { nvrtc().nvrtcDestroyProgram(&p); }
  } guard{prog};
  const std::string arch_opt = "--gpu-architecture=" + arch;
  const char* opts[] = {arch_opt.c_str(), "--std=c++17", "-default-device", "--Ofast-compile=max"};
  const nvrtcResult r = nvrtc().nvrtcCompileProgram(prog, fast_compile ? 4 : 3, opts);
  size_t log_size = 0;
  nvrtc().nvrtcGetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size > 1) nvrtc().nvrtcGetProgramLog(prog, log.data());
  if (r != NVRTC_SUCCESS)
    throw Error("NVRTC could not compile CUDA kernel '" + entry + "' for " + arch + ": " +
                nvrtc().nvrtcGetErrorString(r) + "\n" + log);
  size_t n = 0;
  RLX_NVRTC_CHECK(nvrtc().nvrtcGetCUBINSize(prog, &n));
  std::vector<char> cubin(n);
  RLX_NVRTC_CHECK(nvrtc().nvrtcGetCUBIN(prog, cubin.data()));
  return cubin;
}


std::string kernel_cache_dir() { return rlx::kernel_cache_dir("cuda"); }

CUfunction get_kernel(const std::string& entry, const std::string& source, const std::string& arch_override) {
  const DeviceInfo& dev = device();
  static const std::string version = nvrtc_version();
  const std::string arch = arch_override.empty() ? dev.arch() : arch_override;
  const std::string key = hex64(fnv1a64(source)) + "-" + arch + "-nvrtc" + version;

  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  if (auto it = c.functions.find(key + ":" + entry); it != c.functions.end()) {
    ++c.stats.memory_hits;
    return it->second;
  }
  CUmodule mod = nullptr;
  if (auto it = c.by_source.find(key); it != c.by_source.end()) {
    mod = it->second;
    ++c.stats.memory_hits;
  } else {
    const std::string dir = kernel_cache_dir();
    std::vector<char> cubin = disk_cache_load(dir, key, ".cubin", source);
    if (!cubin.empty() && driver().module_load_data(&mod, cubin.data()) == CUDA_SUCCESS) {
      ++c.stats.disk_hits;
    } else {
      cubin = nvrtc_compile(entry, source, arch);
      ++c.stats.compiled;
      RLX_CU_CHECK(driver().module_load_data(&mod, cubin.data()));
      disk_cache_store(dir, key, ".cubin", source, cubin);
    }
    c.by_source.emplace(key, mod);
  }
  CUfunction fn = nullptr;
  if (driver().module_get_function(&fn, mod, entry.c_str()) != CUDA_SUCCESS)
    throw Error("CUDA kernel '" + entry + "' is not defined by its source (cuModuleGetFunction failed); the entry "
                "must be declared extern \"C\" __global__");
  c.functions.emplace(key + ":" + entry, fn);
  return fn;
}

KernelCacheStats kernel_cache_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void kernel_cache_forget_memory() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.functions.clear();
  c.by_source.clear();
}

}  // namespace rlx::cuda
