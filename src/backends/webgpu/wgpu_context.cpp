#include "backends/webgpu/wgpu_context.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "rlx/error.h"
#include "runtime/knobs.h"

namespace rlx::webgpu {
namespace {

constexpr const char* kChromiumSwiftShader = "/usr/lib/chromium/vk_swiftshader_icd.json";

std::mutex g_errors_mutex;
std::vector<std::string> g_uncaptured;  // errors reported outside a scope, until check_uncaptured

const char* error_type_name(abi::ErrorType t) {
  switch (t) {
    case abi::ErrorType::Validation: return "validation error";
    case abi::ErrorType::OutOfMemory: return "out of memory";
    case abi::ErrorType::Internal: return "internal error";
    default: return "error";
  }
}

std::string backend_name(abi::BackendType b) {
  switch (b) {
    case abi::BackendType::Null: return "Null";
    case abi::BackendType::WebGPU: return "WebGPU";
    case abi::BackendType::D3D11: return "D3D11";
    case abi::BackendType::D3D12: return "D3D12";
    case abi::BackendType::Metal: return "Metal";
    case abi::BackendType::Vulkan: return "Vulkan";
    case abi::BackendType::OpenGL: return "OpenGL";
    case abi::BackendType::OpenGLES: return "OpenGLES";
    default: return "undefined (" + std::to_string(static_cast<uint32_t>(b)) + ")";
  }
}

abi::BackendType wanted_backend() {
  const std::string b = process_knobs::webgpu_backend();
  if (b.empty() || b == "vulkan") return abi::BackendType::Vulkan;
  if (b == "opengles") return abi::BackendType::OpenGLES;
  if (b == "opengl") return abi::BackendType::OpenGL;
  if (b == "d3d12") return abi::BackendType::D3D12;
  if (b == "metal") return abi::BackendType::Metal;
  throw Error("WebGPU: RLX_WEBGPU_BACKEND='" + b + "' is not one of vulkan, opengles, opengl, d3d12, metal");
}

// Sets an environment variable for the lifetime of the object (the Vulkan loader reads the
// driver list when Dawn creates its Vulkan instance); `old` is its value before (or null).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* old, const std::string& value) : name_(name) {
    if (value.empty()) return;
    if (old) old_ = old, had_ = true;
    setenv(name, value.c_str(), 1);
    set_ = true;
  }
  ~ScopedEnv() {
    if (!set_) return;
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false, set_ = false;
};

// What Dawn and the Vulkan drivers print on stderr while adapters are probed (warnings about
// drivers Dawn refuses, display-server notes of CPU drivers) is kept, not shown: it becomes part
// of the error when no adapter is found.
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    file_ = std::tmpfile();
    saved_ = file_ ? dup(2) : -1;
    if (saved_ >= 0) dup2(fileno(file_), 2);
  }
  ~StderrCapture() { restore(); if (file_) std::fclose(file_); }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;
  // Restores stderr and returns what was written meanwhile (the last 2000 characters).
  std::string restore() {
    if (saved_ < 0) return text_;
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    saved_ = -1;
    std::rewind(file_);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, file_)) > 0) text_.append(buf, n);
    if (text_.size() > 2000) text_ = "..." + text_.substr(text_.size() - 2000);
    return text_;
  }

 private:
  std::FILE* file_ = nullptr;
  int saved_ = -1;
  std::string text_;
};

abi::Instance make_instance(const Api& a) {
  abi::InstanceDescriptor d;
  d.capabilities.timed_wait_any_enable = 1;
  abi::Instance inst = a.CreateInstance(&d);
  if (!inst) throw Error("WebGPU: wgpuCreateInstance failed (library " + a.path + ")");
  return inst;
}

struct AdapterReply {
  abi::RequestAdapterStatus status{};
  abi::Adapter adapter = nullptr;
  std::string message;
};

void wait_on(const Api& a, abi::Instance inst, abi::Future f, const std::string& what) {
  abi::FutureWaitInfo w{f, 0};
  const int64_t limit_s = process_knobs::webgpu_wait_s();
  const abi::WaitStatus s = a.InstanceWaitAny(inst, 1, &w, static_cast<uint64_t>(limit_s) * 1'000'000'000ull);
  if (s == abi::WaitStatus::TimedOut)
    throw Error("WebGPU: waiting for " + what + " took longer than " + std::to_string(limit_s) +
                " s; set RLX_WEBGPU_WAIT_S to wait longer (a CPU adapter on a loaded machine can need minutes)");
  if (s != abi::WaitStatus::Success || !w.completed)
    throw Error("WebGPU: waiting for " + what + " failed (wgpuInstanceWaitAny status " +
                std::to_string(static_cast<uint32_t>(s)) + ")");
}

// The adapter for the wanted backend on `inst`, or null with *why set.
abi::Adapter request_adapter(const Api& a, abi::Instance inst, abi::BackendType backend, std::string* why) {
  abi::RequestAdapterOptions o;
  o.backend_type = backend;
  AdapterReply r;
  abi::CallbackInfo<abi::RequestAdapterCallback> cb;
  cb.callback = [](abi::RequestAdapterStatus s, abi::Adapter ad, abi::StringView msg, void* u1, void*) {
    auto* rep = static_cast<AdapterReply*>(u1);
    rep->status = s, rep->adapter = ad, rep->message = str(msg);
  };
  cb.userdata1 = &r;
  wait_on(a, inst, a.InstanceRequestAdapter(inst, &o, cb), "an adapter");
  if (r.status != abi::RequestAdapterStatus::Success || !r.adapter) {
    *why = "Dawn returned no " + backend_name(backend) + " adapter" + (r.message.empty() ? "" : ": " + r.message);
    return nullptr;
  }
  abi::AdapterInfo info;
  if (a.AdapterGetInfo(r.adapter, &info) != abi::Status::Success) {
    *why = "wgpuAdapterGetInfo failed";
    a.AdapterRelease(r.adapter);
    return nullptr;
  }
  const abi::BackendType got = info.backend_type;
  const std::string name = str(info.device) + " " + str(info.description);
  a.AdapterInfoFreeMembers(info);
  if (got != backend) {
    *why = "Dawn offered a " + backend_name(got) + " adapter (" + name + ") for a " + backend_name(backend) +
           " request (the Null adapter runs nothing)";
    a.AdapterRelease(r.adapter);
    return nullptr;
  }
  const std::string want = process_knobs::webgpu_adapter();
  if (!want.empty() && name.find(want) == std::string::npos) {
    *why = "the adapter '" + name + "' does not contain RLX_WEBGPU_ADAPTER='" + want + "'";
    a.AdapterRelease(r.adapter);
    return nullptr;
  }
  return r.adapter;
}

// Checks that what Dawn wrote into our Limits makes sense for this ABI: a layout that does not
// match the library shows as absurd values (or as bytes written past the struct).
void check_limits(const abi::Limits& l, const std::string& where) {
  auto bad = [&](const std::string& field, uint64_t v) {
    throw Error("WebGPU: the library's WGPULimits layout does not match rlx's declarations (" + where + ": " + field +
                " = " + std::to_string(v) +
                "); the library is not the Dawn build rlx is written against (bun-webgpu-linux-x64 0.1.7)");
  };
  if (l.max_bind_groups < 4 || l.max_bind_groups > 1024) bad("maxBindGroups", l.max_bind_groups);
  if (l.max_compute_workgroup_size_x < 256 || l.max_compute_workgroup_size_x > 65536)
    bad("maxComputeWorkgroupSizeX", l.max_compute_workgroup_size_x);
  if (l.max_compute_workgroups_per_dimension < 65535) bad("maxComputeWorkgroupsPerDimension", l.max_compute_workgroups_per_dimension);
  if (l.max_storage_buffer_binding_size < (128ull << 20)) bad("maxStorageBufferBindingSize", l.max_storage_buffer_binding_size);
  if (l.min_storage_buffer_offset_alignment == 0 || (l.min_storage_buffer_offset_alignment & (l.min_storage_buffer_offset_alignment - 1)))
    bad("minStorageBufferOffsetAlignment", l.min_storage_buffer_offset_alignment);
  if (l.max_buffer_size < l.max_storage_buffer_binding_size / 2) bad("maxBufferSize", l.max_buffer_size);
}

// Dawn fills `l` in place; a guard area after it must stay untouched (a larger struct in the
// library would write into it).
abi::Limits read_limits(const std::function<abi::Status(abi::Limits*)>& get, const std::string& where) {
  struct Guarded {
    abi::Limits limits{};
    unsigned char guard[256];
  } g;
  std::memset(g.guard, 0xA5, sizeof(g.guard));
  if (get(&g.limits) != abi::Status::Success) throw Error("WebGPU: reading the " + where + " limits failed");
  for (unsigned char c : g.guard)
    if (c != 0xA5)
      throw Error("WebGPU: the library wrote past WGPULimits (" + where +
                  "); it is not the Dawn build rlx is written against (bun-webgpu-linux-x64 0.1.7)");
  check_limits(g.limits, where);
  return g.limits;
}

struct Created {
  Context cx;
  std::string error;
};

Created create() {
  Created c;
  const Api* ap = nullptr;
  try {
    ap = &api();
  } catch (const Error& e) {
    c.error = e.what();
    return c;
  }
  const Api& a = *ap;
  try {
    const abi::BackendType backend = wanted_backend();
    const std::string icd_knob = process_knobs::webgpu_vk_icd();
    std::vector<std::string> drivers;  // "" = the system's
    if (backend != abi::BackendType::Vulkan || icd_knob.empty() || icd_knob == "auto" || icd_knob == "system")
      drivers.push_back("");
    if (backend == abi::BackendType::Vulkan) {
      if ((icd_knob.empty() || icd_knob == "auto") && std::filesystem::exists(kChromiumSwiftShader))
        drivers.push_back(kChromiumSwiftShader);
      else if (!icd_knob.empty() && icd_knob != "auto" && icd_knob != "system") {
        if (!std::filesystem::exists(icd_knob))
          throw Error("WebGPU: RLX_WEBGPU_VK_ICD='" + icd_knob + "' does not exist; give a Vulkan ICD json file");
        drivers.push_back(icd_knob);
      }
    }
    std::string whys;
    for (const std::string& drv : drivers) {
      ScopedEnv env("VK_ICD_FILENAMES", std::getenv("VK_ICD_FILENAMES"), drv);
      ScopedEnv env2("VK_DRIVER_FILES", std::getenv("VK_DRIVER_FILES"), drv);
      abi::Instance inst = make_instance(a);
      std::string why;
      abi::Adapter ad = request_adapter(a, inst, backend, &why);
      if (!ad) {
        whys += (whys.empty() ? "" : "; ") + (drv.empty() ? std::string("system drivers: ") : drv + ": ") + why;
        a.InstanceRelease(inst);
        continue;
      }
      c.cx.instance = inst;
      c.cx.adapter = ad;
      c.cx.info.driver = drv;
      break;
    }
    if (!c.cx.adapter) {
      c.error = "no WebGPU adapter: " + whys +
                (backend == abi::BackendType::Vulkan && !std::filesystem::exists(kChromiumSwiftShader)
                     ? " (without a GPU, install Debian's chromium package for SwiftShader: scripts/install-deps.sh)"
                     : "");
      return c;
    }
    Context& cx = c.cx;
    abi::AdapterInfo ai;
    a.AdapterGetInfo(cx.adapter, &ai);
    cx.info.name = str(ai.device);
    if (const std::string d = str(ai.description); !d.empty() && d != cx.info.name) cx.info.name += " (" + d + ")";
    cx.info.backend = backend_name(ai.backend_type);
    switch (ai.adapter_type) {
      case abi::AdapterType::DiscreteGPU: cx.info.adapter_type = "discrete GPU"; break;
      case abi::AdapterType::IntegratedGPU: cx.info.adapter_type = "integrated GPU"; break;
      case abi::AdapterType::CPU: cx.info.adapter_type = "CPU"; break;
      default: cx.info.adapter_type = "unknown";
    }
    cx.info.subgroup_min = ai.subgroup_min_size;
    cx.info.subgroup_max = ai.subgroup_max_size;
    a.AdapterInfoFreeMembers(ai);
    const abi::Limits adapter_limits =
        read_limits([&](abi::Limits* l) { return a.AdapterGetLimits(cx.adapter, l); }, "adapter");
    std::vector<abi::FeatureName> features;
    for (abi::FeatureName f : {abi::FeatureName::ShaderF16, abi::FeatureName::Subgroups, abi::FeatureName::TimestampQuery})
      if (a.AdapterHasFeature(cx.adapter, f)) features.push_back(f);
    // Timestamps at full resolution (Dawn quantizes them by default); without robustness, Tint
    // does not clamp every buffer index and Dawn does not zero workgroup memory (rlx's kernels
    // check their own bounds and initialize what they read).
    std::vector<const char*> disabled{"timestamp_quantization"};
    std::vector<const char*> enabled;
    if (!process_knobs::webgpu_robustness()) enabled.push_back("disable_robustness"), enabled.push_back("disable_workgroup_init");
    abi::DawnTogglesDescriptor toggles;
    toggles.enabled_count = enabled.size();
    toggles.enabled = enabled.data();
    toggles.disabled_count = disabled.size();
    toggles.disabled = disabled.data();
    abi::DeviceDescriptor dd;
    dd.next = &toggles.chain;
    dd.label = view("rlx");
    dd.required_feature_count = features.size();
    dd.required_features = features.data();
    dd.required_limits = &adapter_limits;  // everything the adapter allows (the defaults are far lower)
    dd.device_lost.mode = abi::CallbackMode::AllowSpontaneous;
    dd.device_lost.callback = [](const abi::Device*, abi::DeviceLostReason reason, abi::StringView msg, void*, void*) {
      if (reason == abi::DeviceLostReason::Destroyed || reason == abi::DeviceLostReason::CallbackCancelled) return;
      std::lock_guard<std::mutex> lock(g_errors_mutex);
      g_uncaptured.push_back("the device was lost: " + str(msg));
    };
    dd.uncaptured_error.callback = [](const abi::Device*, abi::ErrorType type, abi::StringView msg, void*, void*) {
      std::lock_guard<std::mutex> lock(g_errors_mutex);
      g_uncaptured.push_back(std::string(error_type_name(type)) + ": " + str(msg));
    };
    struct DeviceReply {
      abi::RequestDeviceStatus status{};
      abi::Device device = nullptr;
      std::string message;
    } r;
    abi::CallbackInfo<abi::RequestDeviceCallback> cb;
    cb.callback = [](abi::RequestDeviceStatus s, abi::Device d, abi::StringView msg, void* u1, void*) {
      auto* rep = static_cast<DeviceReply*>(u1);
      rep->status = s, rep->device = d, rep->message = str(msg);
    };
    cb.userdata1 = &r;
    wait_on(a, cx.instance, a.AdapterRequestDevice(cx.adapter, &dd, cb), "the device");
    if (r.status != abi::RequestDeviceStatus::Success || !r.device) {
      c.error = "the adapter " + cx.info.name + " gave no device: " + r.message;
      return c;
    }
    cx.device = r.device;
    cx.queue = a.DeviceGetQueue(cx.device);
    cx.info.limits = read_limits([&](abi::Limits* l) { return a.DeviceGetLimits(cx.device, l); }, "device");
    for (abi::FeatureName f : features) {
      if (f == abi::FeatureName::ShaderF16) cx.info.shader_f16 = true;
      if (f == abi::FeatureName::Subgroups) cx.info.subgroups = true;
      if (f == abi::FeatureName::TimestampQuery) cx.info.timestamps = true;
    }
  } catch (const Error& e) {
    c.error = e.what();
  }
  return c;
}

Created& created() {
  static Created c = [] {
    StderrCapture capture;
    Created r = create();
    const std::string printed = capture.restore();
    if (!r.error.empty() && !printed.empty()) r.error += "\n(what Dawn printed while probing adapters:\n" + printed + ")";
    return r;
  }();
  return c;
}

}  // namespace

Context& context() {
  Created& c = created();
  if (!c.error.empty()) throw Error("no WebGPU device: " + c.error);
  return c.cx;
}

std::string unavailable_reason() { return created().error; }

void wait_for(abi::Future f, const std::string& what) { wait_on(api(), context().instance, f, what); }

void scoped(const std::string& what, const std::function<void()>& call) {
  const Api& a = api();
  Context& cx = context();
  a.DevicePushErrorScope(cx.device, abi::ErrorFilter::OutOfMemory);
  a.DevicePushErrorScope(cx.device, abi::ErrorFilter::Validation);
  call();
  struct Reply {
    abi::ErrorType type = abi::ErrorType::NoError;
    std::string message;
  } validation, oom;
  auto pop = [&](Reply& r) {
    abi::CallbackInfo<abi::PopErrorScopeCallback> cb;
    cb.callback = [](abi::PopErrorScopeStatus, abi::ErrorType type, abi::StringView msg, void* u1, void*) {
      auto* rep = static_cast<Reply*>(u1);
      rep->type = type, rep->message = str(msg);
    };
    cb.userdata1 = &r;
    wait_on(a, cx.instance, a.DevicePopErrorScope(cx.device, cb), "an error scope");
  };
  pop(validation);
  pop(oom);
  for (const Reply* r : {&validation, &oom})
    if (r->type != abi::ErrorType::NoError)
      throw Error("WebGPU: " + what + ": " + error_type_name(r->type) + ": " + r->message);
}

void check_uncaptured(const std::string& what) {
  std::vector<std::string> errs;
  {
    std::lock_guard<std::mutex> lock(g_errors_mutex);
    errs.swap(g_uncaptured);
  }
  if (errs.empty()) return;
  std::string m = "WebGPU: " + what + ": " + errs.front();
  if (errs.size() > 1) m += " (and " + std::to_string(errs.size() - 1) + " more)";
  throw Error(m);
}

}  // namespace rlx::webgpu
