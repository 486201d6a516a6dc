// cuBLASLt and NVRTC loaded at run time (see cuda_libs.h).
#include "backends/cuda/cuda_libs.h"

#include <cuda.h>
#include <dlfcn.h>

#include <atomic>
#include <map>
#include <mutex>
#include <type_traits>

#include "rlx/error.h"
#include "runtime/knobs.h"

#ifndef RLX_CUDA_LIBRARY_DIR
#define RLX_CUDA_LIBRARY_DIR ""
#endif

namespace rlx::cuda {
namespace {

// What the messages say about one library.
struct LibraryKind {
  const char* what;      // "cuBLASLt"
  const char* soname;    // "libcublasLt.so." (the default file: + major)
  const char* variable;  // its knob's variable
  const char* install;   // what provides it, after "install the CUDA <major> "
  int major;             // the major version of the headers rlx was built with
};

const LibraryKind kCublasLt{"cuBLASLt", "libcublasLt.so.", "RLX_CUBLASLT_LIB",
                            "cuBLAS libraries (the toolkit's, or the nvidia-cublas pip wheel)", CUBLAS_VER_MAJOR};
const LibraryKind kNvrtc{"NVRTC", "libnvrtc.so.", "RLX_NVRTC_LIB",
                         "NVRTC library (the toolkit's, or the nvidia-cuda-nvrtc pip wheel)", CUDA_VERSION / 1000};

std::string default_name(const LibraryKind& k) { return k.soname + std::to_string(k.major); }

template <class Api>
struct Loaded {
  Api api;
  std::string failure;  // non-empty: why this library cannot be used
};

std::string what_to_do(const LibraryKind& k, const std::string& name) {
  return "; install the CUDA " + std::to_string(k.major) + " " + k.install +
         " and add its folder to LD_LIBRARY_PATH, or set " + k.variable + " to the library file's path" +
         (name != default_name(k) ? " (it names " + name + " now)" : std::string());
}

// dlopen of `name`; a bare file name is looked for on the loader's path, then in the toolkit's
// library folder of the build. Null with `failure` set when neither has it.
void* open_library(const LibraryKind& k, const std::string& name, std::string& failure) {
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib) return lib;
  const char* e = dlerror();
  const std::string why = e ? e : "unknown error";
  const std::string dir = RLX_CUDA_LIBRARY_DIR;
  std::string where;
  if (name.find('/') != std::string::npos) {
    where = "at " + name;
  } else {
    where = "on the dynamic loader's path (LD_LIBRARY_PATH, the ld.so cache, the system folders)";
    if (!dir.empty()) {
      if ((lib = dlopen((dir + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL))) return lib;
      where += " and in " + dir + " (the CUDA toolkit rlx was built with)";
    }
  }
  failure = std::string(k.what) + " could not be loaded: " + name + " was looked for " + where + " (" + why + ")" +
            what_to_do(k, name);
  return nullptr;
}

// Loads `name` and resolves every function of `Api` through `resolve_all(resolve)`; then
// `check_version(api)` returns "" or why the library's version does not fit.
template <class Api, class ResolveAll, class CheckVersion>
Loaded<Api> load(const LibraryKind& k, const std::string& name, ResolveAll resolve_all, CheckVersion check_version) {
  Loaded<Api> l;
  void* lib = open_library(k, name, l.failure);
  if (!lib) return l;
  auto resolve = [&](const char* symbol, auto& fn) {
    if (!l.failure.empty()) return;
    void* p = dlsym(lib, symbol);
    if (!p) {
      l.failure = std::string(k.what) + " could not be used: " + name + " has no function " + symbol +
                  " (not the CUDA " + std::to_string(k.major) + " library rlx was built for)" + what_to_do(k, name);
      return;
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  resolve_all(l.api, resolve);
  if (std::string v = l.failure.empty() ? check_version(l.api) : std::string(); !v.empty())
    l.failure = std::string(k.what) + " could not be used: " + name + " is version " + v +
                " but rlx was built with the CUDA " + std::to_string(k.major) + " headers" + what_to_do(k, name);
  if (!l.failure.empty()) {
    dlclose(lib);
    l.api = Api{};
  }
  return l;  // a usable library stays loaded for the process: handles and tables point into it
}

#define RLX_CUDA_LIB_RESOLVE(fn) resolve(#fn, api.fn);

Loaded<CublasLtApi> load_cublaslt(const std::string& name) {
  return load<CublasLtApi>(
      kCublasLt, name,
      [](CublasLtApi& api, auto& resolve) { RLX_CUBLASLT_FUNCTIONS(RLX_CUDA_LIB_RESOLVE) },
      [](const CublasLtApi& api) {
        const size_t v = api.cublasLtGetVersion();  // major * 10000 + minor * 100 + patch
        return static_cast<int>(v / 10000) == CUBLAS_VER_MAJOR ? std::string() : std::to_string(v);
      });
}

Loaded<NvrtcApi> load_nvrtc(const std::string& name) {
  return load<NvrtcApi>(
      kNvrtc, name, [](NvrtcApi& api, auto& resolve) { RLX_NVRTC_FUNCTIONS(RLX_CUDA_LIB_RESOLVE) },
      [](const NvrtcApi& api) {
        int major = 0, minor = 0;
        if (api.nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return std::string("unknown (nvrtcVersion failed)");
        return major == kNvrtc.major ? std::string() : std::to_string(major) + "." + std::to_string(minor);
      });
}

#undef RLX_CUDA_LIB_RESOLVE

// Loaded once per distinct name, never erased (references stay valid).
template <class Api>
const Loaded<Api>& loaded(const std::string& name, Loaded<Api> (*load_fn)(const std::string&)) {
  static std::mutex mu;
  static std::map<std::string, Loaded<Api>> libs;
  std::lock_guard<std::mutex> lock(mu);
  auto it = libs.find(name);
  if (it == libs.end()) it = libs.emplace(name, load_fn(name)).first;
  return it->second;
}

// Binds the library named now for the process when it loads (the first bind wins); throws why not.
template <class Api>
const Api& bind(std::atomic<const Api*>& bound, const std::string& name,
                Loaded<Api> (*load_fn)(const std::string&)) {
  const Loaded<Api>& l = loaded(name, load_fn);
  if (!l.failure.empty()) throw Error(l.failure);
  const Api* expected = nullptr;
  bound.compare_exchange_strong(expected, &l.api, std::memory_order_acq_rel);
  return *bound.load(std::memory_order_acquire);
}

std::atomic<const CublasLtApi*> bound_cublaslt{nullptr};
std::atomic<const NvrtcApi*> bound_nvrtc{nullptr};

}  // namespace

std::string cublaslt_library_name() {
  const std::string name = process_knobs::cublaslt_lib();
  return name.empty() ? default_name(kCublasLt) : name;
}

std::string nvrtc_library_name() {
  const std::string name = process_knobs::nvrtc_lib();
  return name.empty() ? default_name(kNvrtc) : name;
}

std::string cublaslt_unavailable_reason() { return loaded(cublaslt_library_name(), load_cublaslt).failure; }
std::string nvrtc_unavailable_reason() { return loaded(nvrtc_library_name(), load_nvrtc).failure; }

const CublasLtApi& cublaslt() {
  if (const CublasLtApi* api = bound_cublaslt.load(std::memory_order_acquire)) return *api;  // the run-time path
  return bind(bound_cublaslt, cublaslt_library_name(), load_cublaslt);
}

const NvrtcApi& nvrtc() {
  if (const NvrtcApi* api = bound_nvrtc.load(std::memory_order_acquire)) return *api;
  return bind(bound_nvrtc, nvrtc_library_name(), load_nvrtc);
}

}  // namespace rlx::cuda
