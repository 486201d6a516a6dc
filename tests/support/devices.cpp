#include "support/devices.h"

#include <algorithm>

#include "cuda/cuda_test_util.h"
#include "vulkan/vulkan_test_util.h"
#include "webgpu/webgpu_test_util.h"

namespace rlx::testing {

namespace {

// The built-in table: one entry per GPU backend under test, plus the CPU with the optimizer off
// (no GPU needed: it checks the case list itself and every fusion pass against the unfused graph).
std::vector<TestDevice> builtin_devices() {
  std::vector<TestDevice> v;
  {
    TestDevice d;
    d.name = "cuda";
    d.device = Device::Cuda;
    d.unavailable = cuda_unavailable_reason;
    d.precisions = {Precision::Fp32, Precision::Tf32, Precision::Fp16, Precision::Bf16};
    v.push_back(std::move(d));
  }
  {
    TestDevice d;
    d.name = "vulkan";
    d.device = Device::Vulkan;
    d.unavailable = vulkan_unavailable_reason;
    d.precisions = {Precision::Fp32, Precision::Fp16, Precision::Bf16};
    d.skip_unclaimed = true;
    d.cpu_adapter = vulkan_is_cpu_adapter;  // op families without Vulkan kernels yet are skipped, with the reason
    v.push_back(std::move(d));
  }
  {
    TestDevice d;
    d.name = "webgpu";
    d.device = Device::WebGpu;
    d.unavailable = webgpu_unavailable_reason;
    d.precisions = {Precision::Fp32};
    d.skip_unclaimed = true;  // op families without WGSL kernels yet are skipped, with the reason
    d.cpu_adapter = webgpu_is_cpu_adapter;
    d.documented_limits = {"holds i64 values in 32-bit words", "the device holds i64 tensors as"};
    v.push_back(std::move(d));
  }
  {
    // WebGPU compiled for the limits every browser offers (knob webgpu_limits=web: the kernels
    // and the plan of rlx export-web's bundles), on the same adapter.
    TestDevice d;
    d.name = "web-limits";
    d.device = Device::WebGpu;
    d.unavailable = webgpu_unavailable_reason;
    d.precisions = {Precision::Fp32};
    d.skip_unclaimed = true;
    d.cpu_adapter = webgpu_is_cpu_adapter;
    d.documented_limits = {"holds i64 values in 32-bit words", "the device holds i64 tensors as"};
    d.options.tuning.webgpu_limits = "web";
    // The families whose kernels read the limits or the optional features (workgroup memory,
    // subgroups, f16); elementwise, shape, conv and select kernels are the same WGSL as 'webgpu'.
    d.families = {"matmul", "rows", "reduce", "attention", "model"};
    d.families_reason = "its kernels of this family are those of 'webgpu' (they read no limit or feature)";
    // f16 and bf16 are f32 words on WebGPU: the same kernels as f32 but for their loads.
    d.dtypes = {DType::F32, DType::I32, DType::I64, DType::Bool, DType::U8, DType::I8, DType::I16, DType::U32};
    v.push_back(std::move(d));
  }
  {
    TestDevice d;
    d.name = "cpu-unoptimized";
    d.device = Device::Cpu;
    d.unavailable = [] { return std::string(); };
    d.options.optimize = false;  // the CPU computes in the graph's dtypes: no other precision policy
    v.push_back(std::move(d));
  }
  return v;
}

std::vector<TestDevice>& registry() {
  static std::vector<TestDevice> devices = builtin_devices();
  return devices;
}

}  // namespace

const std::vector<TestDevice>& test_devices() { return registry(); }

bool register_test_device(TestDevice d) {
  registry().push_back(std::move(d));
  return true;
}

std::string unsupported_reason(const TestDevice& d, const std::vector<DType>& dtypes, Precision precision) {
  if (std::find(d.precisions.begin(), d.precisions.end(), precision) == d.precisions.end())
    return d.name + " has no " + precision_name(precision) + " precision policy";
  if (d.dtypes.empty()) return "";
  std::string missing;
  for (DType t : dtypes)
    if (std::find(d.dtypes.begin(), d.dtypes.end(), t) == d.dtypes.end())
      missing += std::string(missing.empty() ? "" : ", ") + dtype_name(t);
  return missing.empty() ? "" : d.name + " does not run " + missing;
}

}  // namespace rlx::testing
