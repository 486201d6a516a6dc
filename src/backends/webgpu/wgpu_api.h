#pragma once
// The Dawn library, opened at run time (dlopen): the `wgpu*` entry points the WebGPU backend
// calls, as one table. The library file comes from the knob webgpu_lib (RLX_WEBGPU_LIB; default
// the copy scripts/install-deps.sh installs). Nothing is linked at build time, so rlx builds and
// starts where no Dawn library exists; Device::WebGpu then reports why it is unavailable.
#include <string>

#include "backends/webgpu/wgpu_abi.h"

namespace rlx::webgpu {

#define RLX_WGPU_FUNCTIONS(X)                                                                                       \
  X(CreateInstance, abi::Instance, const abi::InstanceDescriptor*)                                                \
  X(InstanceRelease, void, abi::Instance)                                                                         \
  X(InstanceRequestAdapter, abi::Future, abi::Instance, const abi::RequestAdapterOptions*,                         \
    abi::CallbackInfo<abi::RequestAdapterCallback>)                                                               \
  X(InstanceWaitAny, abi::WaitStatus, abi::Instance, size_t, abi::FutureWaitInfo*, uint64_t)                      \
  X(InstanceProcessEvents, void, abi::Instance)                                                                   \
  X(AdapterGetInfo, abi::Status, abi::Adapter, abi::AdapterInfo*)                                                 \
  X(AdapterInfoFreeMembers, void, abi::AdapterInfo)                                                               \
  X(AdapterGetLimits, abi::Status, abi::Adapter, abi::Limits*)                                                    \
  X(AdapterHasFeature, abi::Bool, abi::Adapter, abi::FeatureName)                                                 \
  X(AdapterRequestDevice, abi::Future, abi::Adapter, const abi::DeviceDescriptor*,                                 \
    abi::CallbackInfo<abi::RequestDeviceCallback>)                                                                \
  X(AdapterRelease, void, abi::Adapter)                                                                           \
  X(DeviceGetQueue, abi::Queue, abi::Device)                                                                      \
  X(DeviceGetLimits, abi::Status, abi::Device, abi::Limits*)                                                      \
  X(DeviceCreateBuffer, abi::Buffer, abi::Device, const abi::BufferDescriptor*)                                   \
  X(DeviceCreateShaderModule, abi::ShaderModule, abi::Device, const abi::ShaderModuleDescriptor*)                 \
  X(DeviceCreateBindGroupLayout, abi::BindGroupLayout, abi::Device, const abi::BindGroupLayoutDescriptor*)        \
  X(DeviceCreatePipelineLayout, abi::PipelineLayout, abi::Device, const abi::PipelineLayoutDescriptor*)           \
  X(DeviceCreateComputePipeline, abi::ComputePipeline, abi::Device, const abi::ComputePipelineDescriptor*)        \
  X(DeviceCreateBindGroup, abi::BindGroup, abi::Device, const abi::BindGroupDescriptor*)                          \
  X(DeviceCreateCommandEncoder, abi::CommandEncoder, abi::Device, const abi::CommandEncoderDescriptor*)            \
  X(DeviceCreateQuerySet, abi::QuerySet, abi::Device, const abi::QuerySetDescriptor*)                             \
  X(DevicePushErrorScope, void, abi::Device, abi::ErrorFilter)                                                    \
  X(DevicePopErrorScope, abi::Future, abi::Device, abi::CallbackInfo<abi::PopErrorScopeCallback>)                 \
  X(DeviceDestroy, void, abi::Device)                                                                             \
  X(DeviceRelease, void, abi::Device)                                                                             \
  X(QueueSubmit, void, abi::Queue, size_t, const abi::CommandBuffer*)                                             \
  X(QueueWriteBuffer, void, abi::Queue, abi::Buffer, uint64_t, const void*, size_t)                               \
  X(QueueOnSubmittedWorkDone, abi::Future, abi::Queue, abi::CallbackInfo<abi::QueueWorkDoneCallback>)             \
  X(QueueRelease, void, abi::Queue)                                                                               \
  X(BufferMapAsync, abi::Future, abi::Buffer, abi::Flags, size_t, size_t, abi::CallbackInfo<abi::BufferMapCallback>) \
  X(BufferGetConstMappedRange, const void*, abi::Buffer, size_t, size_t)                                          \
  X(BufferUnmap, void, abi::Buffer)                                                                               \
  X(BufferDestroy, void, abi::Buffer)                                                                             \
  X(BufferRelease, void, abi::Buffer)                                                                             \
  X(ShaderModuleGetCompilationInfo, abi::Future, abi::ShaderModule,                                               \
    abi::CallbackInfo<abi::CompilationInfoCallback>)                                                              \
  X(ShaderModuleRelease, void, abi::ShaderModule)                                                                 \
  X(BindGroupLayoutRelease, void, abi::BindGroupLayout)                                                           \
  X(PipelineLayoutRelease, void, abi::PipelineLayout)                                                             \
  X(ComputePipelineRelease, void, abi::ComputePipeline)                                                           \
  X(BindGroupRelease, void, abi::BindGroup)                                                                       \
  X(CommandEncoderBeginComputePass, abi::ComputePassEncoder, abi::CommandEncoder,                                 \
    const abi::ComputePassDescriptor*)                                                                            \
  X(CommandEncoderCopyBufferToBuffer, void, abi::CommandEncoder, abi::Buffer, uint64_t, abi::Buffer, uint64_t,     \
    uint64_t)                                                                                                     \
  X(CommandEncoderClearBuffer, void, abi::CommandEncoder, abi::Buffer, uint64_t, uint64_t)                        \
  X(CommandEncoderResolveQuerySet, void, abi::CommandEncoder, abi::QuerySet, uint32_t, uint32_t, abi::Buffer,      \
    uint64_t)                                                                                                     \
  X(CommandEncoderFinish, abi::CommandBuffer, abi::CommandEncoder, const abi::CommandBufferDescriptor*)           \
  X(CommandEncoderRelease, void, abi::CommandEncoder)                                                             \
  X(ComputePassEncoderSetPipeline, void, abi::ComputePassEncoder, abi::ComputePipeline)                           \
  X(ComputePassEncoderSetBindGroup, void, abi::ComputePassEncoder, uint32_t, abi::BindGroup, size_t,              \
    const uint32_t*)                                                                                              \
  X(ComputePassEncoderDispatchWorkgroups, void, abi::ComputePassEncoder, uint32_t, uint32_t, uint32_t)            \
  X(ComputePassEncoderEnd, void, abi::ComputePassEncoder)                                                         \
  X(ComputePassEncoderRelease, void, abi::ComputePassEncoder)                                                     \
  X(CommandBufferRelease, void, abi::CommandBuffer)                                                               \
  X(QuerySetDestroy, void, abi::QuerySet)                                                                         \
  X(QuerySetRelease, void, abi::QuerySet)

struct Api {
#define RLX_WGPU_MEMBER(name, ret, ...) ret (*name)(__VA_ARGS__) = nullptr;
  RLX_WGPU_FUNCTIONS(RLX_WGPU_MEMBER)
#undef RLX_WGPU_MEMBER
  std::string path;  // the library file that was opened
};

// The opened library; rlx::Error saying which file was tried and what to do when it cannot be
// opened or lacks an entry point. Opened once per process.
const Api& api();
// Empty when api() succeeds; else why it does not.
std::string api_unavailable_reason();

// A string view of the library as a std::string (null data -> "").
std::string str(abi::StringView v);
// Views of our strings; the string must outlive the call that reads the view.
abi::StringView view(const std::string& s);
abi::StringView view(const char* s);

}  // namespace rlx::webgpu
