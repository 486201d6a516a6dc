// The lazily loaded cuDNN library (see cudnn_lib.h).
#include "backends/cuda/cudnn_lib.h"

#include <type_traits>

#include "runtime/knobs.h"

#ifdef RLX_HAVE_CUDNN
#include <dlfcn.h>

#include <iterator>
#include <map>
#include <mutex>

#include "backends/cuda/device.h"
#include "rlx/error.h"
#endif

namespace rlx::cuda {

#ifndef RLX_HAVE_CUDNN

std::string cudnn_library_name() {
  const std::string name = process_knobs::cudnn_lib();
  return name.empty() ? "libcudnn.so" : name;
}

std::string cudnn_unavailable_reason() {
  return "cuDNN not found: this rlx was built without the cuDNN header (cudnn.h); rebuild with cuDNN installed "
         "where CMake finds the CUDA toolkit's headers";
}

#else

namespace {

struct Loaded {
  CudnnApi api;
  std::string failure;  // non-empty: why this library cannot be used
};

Loaded load(const std::string& name) {
  Loaded l;
  const std::string hint =
      "; install cuDNN " + std::to_string(CUDNN_MAJOR) +
      " (e.g. the nvidia-cudnn wheel or the CUDA toolkit's cuDNN package) where the dynamic loader finds it, or set "
      "RLX_CUDNN_LIB to the library's path";
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    l.failure = "cuDNN not found: " + name + " could not be loaded (" + (why ? why : "?") + ")" + hint;
    return l;
  }
  bool ok = true;
  auto resolve = [&](const char* symbol, auto& fn) {
    if (!ok) return;
    void* p = dlsym(lib, symbol);
    if (!p) {
      l.failure = "cuDNN not found: " + name + " has no function " + symbol + hint;
      ok = false;
      return;
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
#define RLX_CUDNN_RESOLVE(fn) resolve(#fn, l.api.fn);
  RLX_CUDNN_FUNCTIONS(RLX_CUDNN_RESOLVE)
#undef RLX_CUDNN_RESOLVE
  if (!ok) return l;
  const size_t version = l.api.cudnnGetVersion();
  const size_t major = version >= 10000 ? version / 10000 : version / 1000;  // 9.1.0 = 90100, 8.9.7 = 8907
  if (major != CUDNN_MAJOR)
    l.failure = "cuDNN not found: " + name + " is cuDNN version " + std::to_string(version) + " but rlx was built with the " +
                "cuDNN " + std::to_string(CUDNN_MAJOR) + " header" + hint;
  return l;
}

const Loaded& loaded(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, Loaded> libs;  // never erased: references stay valid
  std::lock_guard<std::mutex> lock(mu);
  auto it = libs.find(name);
  if (it == libs.end()) it = libs.emplace(name, load(name)).first;
  return it->second;
}

}  // namespace

std::string cudnn_library_name() {
  const std::string name = process_knobs::cudnn_lib();
  return name.empty() ? "libcudnn.so." + std::to_string(CUDNN_MAJOR) : name;
}

std::string cudnn_unavailable_reason() { return loaded(cudnn_library_name()).failure; }

const CudnnApi& cudnn() {
  const Loaded& l = loaded(cudnn_library_name());
  if (!l.failure.empty()) throw Error(l.failure);
  return l.api;
}

void check_cudnn(const CudnnApi& api, cudnnStatus_t s, const char* call, const std::string& what) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  const char* name = api.cudnnGetErrorString(s);
  throw Error(what + ": " + call + " failed: " + (name ? name : "unknown cuDNN status") + " (status " +
              std::to_string(static_cast<int>(s)) + ")");
}

CudnnHandle::CudnnHandle(const CudnnApi& api) : api_(api) {
  device();
  RLX_CUDNN_CHECK(api_, cudnnCreate(&h_), "creating a cuDNN handle");
}

CudnnHandle::~CudnnHandle() {
  if (h_) api_.cudnnDestroy(h_);
}

std::shared_ptr<CudnnShared> cudnn_shared_for(const void* owner) {
  static std::mutex mu;
  static std::map<const void*, std::weak_ptr<CudnnShared>> states;
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = states.begin(); it != states.end();) it = it->second.expired() ? states.erase(it) : std::next(it);
  std::shared_ptr<CudnnShared> s = states[owner].lock();
  if (!s) {
    s = std::make_shared<CudnnShared>(cudnn());
    states[owner] = s;
  }
  return s;
}

#endif  // RLX_HAVE_CUDNN

}  // namespace rlx::cuda
