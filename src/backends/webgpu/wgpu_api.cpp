#include "backends/webgpu/wgpu_api.h"

#include <dlfcn.h>

#include <mutex>

#include "rlx/error.h"
#include "runtime/knobs.h"

namespace rlx::webgpu {
namespace {

struct Loaded {
  Api api;
  std::string error;  // non-empty: the library could not be used
};

Loaded open_library() {
  Loaded l;
  const std::string path = process_knobs::webgpu_lib().empty() ? "/usr/local/lib/rlx-webgpu/libwebgpu_wrapper.so"
                                                               : process_knobs::webgpu_lib();
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    l.error = "the Dawn WebGPU library " + path + " could not be opened (" + (e ? e : "unknown error") +
              "); run scripts/install-deps.sh, or point RLX_WEBGPU_LIB at a libwebgpu_wrapper.so";
    return l;
  }
  l.api.path = path;
#define RLX_WGPU_LOAD(name, ret, ...)                                                                         \
  l.api.name = reinterpret_cast<ret (*)(__VA_ARGS__)>(dlsym(h, "wgpu" #name));                                 \
  if (!l.api.name && l.error.empty())                                                                         \
    l.error = "the WebGPU library " + path + " has no entry point wgpu" #name                                  \
              "; it is not the Dawn build rlx is written against (bun-webgpu-linux-x64 0.1.7's "               \
              "libwebgpu_wrapper.so)";
  RLX_WGPU_FUNCTIONS(RLX_WGPU_LOAD)
#undef RLX_WGPU_LOAD
  // The library stays loaded for the process: Dawn's threads and callbacks may outlive any object.
  return l;
}

const Loaded& loaded() {
  static const Loaded l = open_library();
  return l;
}

}  // namespace

const Api& api() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw Error("WebGPU: " + l.error);
  return l.api;
}

std::string api_unavailable_reason() { return loaded().error; }

std::string str(abi::StringView v) {
  if (!v.data) return {};
  if (v.length == abi::kStrlen) return std::string(v.data);
  return std::string(v.data, v.length);
}

abi::StringView view(const std::string& s) { return {s.data(), s.size()}; }
abi::StringView view(const char* s) { return {s, abi::kStrlen}; }

}  // namespace rlx::webgpu
