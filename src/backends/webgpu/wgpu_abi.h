#pragma once
// Our own declarations of the part of the standard `wgpu*` C API (webgpu.h) the WebGPU backend
// uses, pinned to the Dawn library it loads at run time (libwebgpu_wrapper.so of the package
// bun-webgpu-linux-x64 0.1.7, a Dawn build of mid-2025). No installed webgpu.h matches that
// library exactly, so the layouts are written here and checked when the library is opened
// (wgpu_api.cpp: struct sizes, and the values Dawn writes back must make sense).
//
// Conventions of that ABI: strings are {pointer, length} views (length SIZE_MAX = NUL-terminated);
// asynchronous calls take a callback-info struct by value (mode + callback + two user pointers)
// and return a future that wgpuInstanceWaitAny waits on; flags are 64-bit; WGPUBool is 32-bit.
#include <cstddef>
#include <cstdint>

namespace rlx::webgpu::abi {

using Flags = uint64_t;
using Bool = uint32_t;

struct InstanceImpl;
struct AdapterImpl;
struct DeviceImpl;
struct QueueImpl;
struct BufferImpl;
struct ShaderModuleImpl;
struct BindGroupLayoutImpl;
struct BindGroupImpl;
struct PipelineLayoutImpl;
struct ComputePipelineImpl;
struct CommandEncoderImpl;
struct ComputePassEncoderImpl;
struct CommandBufferImpl;
struct QuerySetImpl;
using Instance = InstanceImpl*;
using Adapter = AdapterImpl*;
using Device = DeviceImpl*;
using Queue = QueueImpl*;
using Buffer = BufferImpl*;
using ShaderModule = ShaderModuleImpl*;
using BindGroupLayout = BindGroupLayoutImpl*;
using BindGroup = BindGroupImpl*;
using PipelineLayout = PipelineLayoutImpl*;
using ComputePipeline = ComputePipelineImpl*;
using CommandEncoder = CommandEncoderImpl*;
using ComputePassEncoder = ComputePassEncoderImpl*;
using CommandBuffer = CommandBufferImpl*;
using QuerySet = QuerySetImpl*;

inline constexpr size_t kStrlen = SIZE_MAX;      // a StringView of a NUL-terminated string
inline constexpr uint64_t kWholeSize = UINT64_MAX;
inline constexpr uint32_t kQueryIndexNone = UINT32_MAX;

// ---- enums (32-bit) ----
enum class SType : uint32_t { ShaderSourceWGSL = 0x2, AdapterPropertiesSubgroups = 0xC, DawnTogglesDescriptor = 0x5000A };
enum class BackendType : uint32_t { Undefined = 0, Null = 1, WebGPU = 2, D3D11 = 3, D3D12 = 4, Metal = 5, Vulkan = 6,
                                    OpenGL = 7, OpenGLES = 8 };
enum class AdapterType : uint32_t { DiscreteGPU = 1, IntegratedGPU = 2, CPU = 3, Unknown = 4 };
enum class FeatureLevel : uint32_t { Undefined = 0, Compatibility = 1, Core = 2 };
enum class PowerPreference : uint32_t { Undefined = 0, LowPower = 1, HighPerformance = 2 };
// The numbering of this Dawn build (later webgpu.h versions renumber these).
enum class FeatureName : uint32_t { TimestampQuery = 0x3, ShaderF16 = 0xA, Subgroups = 0x11 };
enum class CallbackMode : uint32_t { WaitAnyOnly = 1, AllowProcessEvents = 2, AllowSpontaneous = 3 };
enum class WaitStatus : uint32_t { Success = 1, TimedOut = 2, Error = 3 };
enum class Status : uint32_t { Success = 1, Error = 2 };
enum class RequestAdapterStatus : uint32_t { Success = 1 };
enum class RequestDeviceStatus : uint32_t { Success = 1 };
enum class MapAsyncStatus : uint32_t { Success = 1 };
enum class QueueWorkDoneStatus : uint32_t { Success = 1 };
enum class PopErrorScopeStatus : uint32_t { Success = 1 };
enum class ErrorType : uint32_t { NoError = 1, Validation = 2, OutOfMemory = 3, Internal = 4, Unknown = 5 };
enum class ErrorFilter : uint32_t { Validation = 1, OutOfMemory = 2, Internal = 3 };
enum class DeviceLostReason : uint32_t { Unknown = 1, Destroyed = 2, CallbackCancelled = 3, FailedCreation = 4 };
enum class CompilationInfoRequestStatus : uint32_t { Success = 1 };
enum class CompilationMessageType : uint32_t { Error = 1, Warning = 2, Info = 3 };
enum class BufferBindingType : uint32_t { NotUsed = 0, Undefined = 1, Uniform = 2, Storage = 3, ReadOnlyStorage = 4 };
enum class QueryType : uint32_t { Occlusion = 1, Timestamp = 2 };

// ---- 64-bit flags ----
namespace usage {
inline constexpr Flags MapRead = 0x1, MapWrite = 0x2, CopySrc = 0x4, CopyDst = 0x8, Uniform = 0x40, Storage = 0x80,
                       QueryResolve = 0x200;
}
inline constexpr Flags kMapRead = 0x1;
inline constexpr Flags kStageCompute = 0x4;

// ---- structs ----
struct StringView {
  const char* data = nullptr;
  size_t length = 0;
};
struct ChainedStruct {
  ChainedStruct* next = nullptr;
  SType type{};
};
struct Future {
  uint64_t id = 0;
};
struct FutureWaitInfo {
  Future future;
  Bool completed = 0;
};

using RequestAdapterCallback = void (*)(RequestAdapterStatus, Adapter, StringView, void*, void*);
using RequestDeviceCallback = void (*)(RequestDeviceStatus, Device, StringView, void*, void*);
using BufferMapCallback = void (*)(MapAsyncStatus, StringView, void*, void*);
using QueueWorkDoneCallback = void (*)(QueueWorkDoneStatus, StringView, void*, void*);  // message: added in 2025
using PopErrorScopeCallback = void (*)(PopErrorScopeStatus, ErrorType, StringView, void*, void*);
using UncapturedErrorCallback = void (*)(const Device*, ErrorType, StringView, void*, void*);
using DeviceLostCallback = void (*)(const Device*, DeviceLostReason, StringView, void*, void*);
struct CompilationInfo;
using CompilationInfoCallback = void (*)(CompilationInfoRequestStatus, const CompilationInfo*, void*, void*);

// Callback infos of asynchronous calls: {chain, mode, callback, userdata1, userdata2}.
template <class Fn>
struct CallbackInfo {
  ChainedStruct* next = nullptr;
  CallbackMode mode = CallbackMode::WaitAnyOnly;
  Fn callback = nullptr;
  void* userdata1 = nullptr;
  void* userdata2 = nullptr;
};
struct UncapturedErrorCallbackInfo {  // no mode: called whenever an error is not captured
  ChainedStruct* next = nullptr;
  UncapturedErrorCallback callback = nullptr;
  void* userdata1 = nullptr;
  void* userdata2 = nullptr;
};

struct InstanceCapabilities {
  ChainedStruct* next = nullptr;
  Bool timed_wait_any_enable = 0;
  size_t timed_wait_any_max_count = 0;
};
struct InstanceDescriptor {
  ChainedStruct* next = nullptr;
  InstanceCapabilities capabilities;
};

// Dawn's named switches, chained to a device (or instance) descriptor.
struct DawnTogglesDescriptor {
  ChainedStruct chain{nullptr, SType::DawnTogglesDescriptor};
  size_t enabled_count = 0;
  const char* const* enabled = nullptr;
  size_t disabled_count = 0;
  const char* const* disabled = nullptr;
};

struct RequestAdapterOptions {
  ChainedStruct* next = nullptr;
  FeatureLevel feature_level = FeatureLevel::Core;
  PowerPreference power_preference = PowerPreference::HighPerformance;
  Bool force_fallback_adapter = 0;
  BackendType backend_type = BackendType::Undefined;
  void* compatible_surface = nullptr;
};

struct AdapterInfo {
  ChainedStruct* next = nullptr;
  StringView vendor, architecture, device, description;
  BackendType backend_type{};
  AdapterType adapter_type{};
  uint32_t vendor_id = 0, device_id = 0;
  uint32_t subgroup_min_size = 0, subgroup_max_size = 0;
};

struct Limits {
  ChainedStruct* next = nullptr;
  uint32_t max_texture_dimension_1d, max_texture_dimension_2d, max_texture_dimension_3d, max_texture_array_layers;
  uint32_t max_bind_groups, max_bind_groups_plus_vertex_buffers, max_bindings_per_bind_group;
  uint32_t max_dynamic_uniform_buffers_per_pipeline_layout, max_dynamic_storage_buffers_per_pipeline_layout;
  uint32_t max_sampled_textures_per_shader_stage, max_samplers_per_shader_stage;
  uint32_t max_storage_buffers_per_shader_stage, max_storage_textures_per_shader_stage;
  uint32_t max_uniform_buffers_per_shader_stage;
  uint64_t max_uniform_buffer_binding_size, max_storage_buffer_binding_size;
  uint32_t min_uniform_buffer_offset_alignment, min_storage_buffer_offset_alignment;
  uint32_t max_vertex_buffers;
  uint64_t max_buffer_size;
  uint32_t max_vertex_attributes, max_vertex_buffer_array_stride, max_inter_stage_shader_variables;
  uint32_t max_color_attachments, max_color_attachment_bytes_per_sample;
  uint32_t max_compute_workgroup_storage_size, max_compute_invocations_per_workgroup;
  uint32_t max_compute_workgroup_size_x, max_compute_workgroup_size_y, max_compute_workgroup_size_z;
  uint32_t max_compute_workgroups_per_dimension;
  uint32_t max_immediate_size;
  uint32_t max_storage_buffers_in_vertex_stage, max_storage_textures_in_vertex_stage;
  uint32_t max_storage_buffers_in_fragment_stage, max_storage_textures_in_fragment_stage;
};

struct SupportedFeatures {
  size_t count = 0;
  const FeatureName* features = nullptr;
};

struct QueueDescriptor {
  ChainedStruct* next = nullptr;
  StringView label;
};
struct DeviceDescriptor {
  ChainedStruct* next = nullptr;
  StringView label;
  size_t required_feature_count = 0;
  const FeatureName* required_features = nullptr;
  const Limits* required_limits = nullptr;
  QueueDescriptor default_queue;
  CallbackInfo<DeviceLostCallback> device_lost;
  UncapturedErrorCallbackInfo uncaptured_error;
};

struct BufferDescriptor {
  ChainedStruct* next = nullptr;
  StringView label;
  Flags usage = 0;
  uint64_t size = 0;
  Bool mapped_at_creation = 0;
};

struct ShaderSourceWGSL {
  ChainedStruct chain{nullptr, SType::ShaderSourceWGSL};
  StringView code;
};
struct ShaderModuleDescriptor {
  ChainedStruct* next = nullptr;  // -> ShaderSourceWGSL::chain
  StringView label;
};
struct CompilationMessage {
  ChainedStruct* next = nullptr;
  StringView message;
  CompilationMessageType type{};
  uint64_t line_num = 0, line_pos = 0, offset = 0, length = 0;
};
struct CompilationInfo {
  ChainedStruct* next = nullptr;
  size_t message_count = 0;
  const CompilationMessage* messages = nullptr;
};

struct BufferBindingLayout {
  ChainedStruct* next = nullptr;
  BufferBindingType type = BufferBindingType::NotUsed;
  Bool has_dynamic_offset = 0;
  uint64_t min_binding_size = 0;
};
struct SamplerBindingLayout {
  ChainedStruct* next = nullptr;
  uint32_t type = 0;  // BindingNotUsed
};
struct TextureBindingLayout {
  ChainedStruct* next = nullptr;
  uint32_t sample_type = 0, view_dimension = 0;  // BindingNotUsed, Undefined
  Bool multisampled = 0;
};
struct StorageTextureBindingLayout {
  ChainedStruct* next = nullptr;
  uint32_t access = 0, format = 0, view_dimension = 0;  // BindingNotUsed
};
struct BindGroupLayoutEntry {
  ChainedStruct* next = nullptr;
  uint32_t binding = 0;
  Flags visibility = 0;
  uint32_t binding_array_size = 0;  // added to webgpu.h in 2025; this build has it
  BufferBindingLayout buffer;
  SamplerBindingLayout sampler;
  TextureBindingLayout texture;
  StorageTextureBindingLayout storage_texture;
};
struct BindGroupLayoutDescriptor {
  ChainedStruct* next = nullptr;
  StringView label;
  size_t entry_count = 0;
  const BindGroupLayoutEntry* entries = nullptr;
};
struct BindGroupEntry {
  ChainedStruct* next = nullptr;
  uint32_t binding = 0;
  Buffer buffer = nullptr;
  uint64_t offset = 0;
  uint64_t size = kWholeSize;
  void* sampler = nullptr;
  void* texture_view = nullptr;
};
struct BindGroupDescriptor {
  ChainedStruct* next = nullptr;
  StringView label;
  BindGroupLayout layout = nullptr;
  size_t entry_count = 0;
  const BindGroupEntry* entries = nullptr;
};
struct PipelineLayoutDescriptor {
  ChainedStruct* next = nullptr;
  StringView label;
  size_t bind_group_layout_count = 0;
  const BindGroupLayout* bind_group_layouts = nullptr;
  uint32_t immediate_size = 0;
};
struct ConstantEntry {
  ChainedStruct* next = nullptr;
  StringView key;
  double value = 0;
};
struct ComputeState {
  ChainedStruct* next = nullptr;
  ShaderModule module = nullptr;
  StringView entry_point;
  size_t constant_count = 0;
  const ConstantEntry* constants = nullptr;
};
struct ComputePipelineDescriptor {
  ChainedStruct* next = nullptr;
  StringView label;
  PipelineLayout layout = nullptr;
  ComputeState compute;
};
struct CommandEncoderDescriptor {
  ChainedStruct* next = nullptr;
  StringView label;
};
struct PassTimestampWrites {
  ChainedStruct* next = nullptr;
  QuerySet query_set = nullptr;
  uint32_t beginning_index = kQueryIndexNone, end_index = kQueryIndexNone;
};
struct ComputePassDescriptor {
  ChainedStruct* next = nullptr;
  StringView label;
  const PassTimestampWrites* timestamp_writes = nullptr;
};
struct CommandBufferDescriptor {
  ChainedStruct* next = nullptr;
  StringView label;
};
struct QuerySetDescriptor {
  ChainedStruct* next = nullptr;
  StringView label;
  QueryType type = QueryType::Timestamp;
  uint32_t count = 0;
};

// Sizes of the structs Dawn reads or writes, as this ABI lays them out on x86-64 / aarch64 (the
// library is checked against them: wgpu_api.cpp).
static_assert(sizeof(StringView) == 16 && sizeof(ChainedStruct) == 16);
static_assert(sizeof(CallbackInfo<RequestAdapterCallback>) == 40 && sizeof(UncapturedErrorCallbackInfo) == 32);
static_assert(sizeof(AdapterInfo) == 96);
static_assert(sizeof(Limits) == 168);
static_assert(sizeof(DeviceDescriptor) == 144);
static_assert(sizeof(BindGroupLayoutEntry) == 120 && sizeof(BindGroupEntry) == 56);
static_assert(sizeof(ComputePipelineDescriptor) == 80);

}  // namespace rlx::webgpu::abi
