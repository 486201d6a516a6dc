#pragma once
// What a device allows, as the memory plan needs it: buffer and binding sizes, binding offset
// alignment, whether weights share one buffer, and the dtype each logical dtype is stored as.
//
// A backend fills one DeviceLimits from its device (Vulkan: minStorageBufferOffsetAlignment,
// maxStorageBufferRange, maxMemoryAllocationSize; WebGPU: minStorageBufferOffsetAlignment,
// maxStorageBufferBindingSize, maxBufferSize) and its kernel language's capability table
// (`StorageCaps::from(name, [](DType t) { return codegen::wgsl_language().storage_dtype(t); })`),
// and passes it in PlanOptions::device. The defaults describe a device with no limits that holds
// every dtype as itself (the CPU, CUDA): the plan is then exactly the plan without DeviceLimits.
//
// Why storage dtypes are a plan-level mapping, not a graph pass: the graph keeps its logical
// dtypes (shape inference, the CPU oracle, fusion patterns and parity tolerances all speak
// them), and a rewrite to i32/u32 would have to insert casts at every boundary and re-verify
// ops whose attributes are typed (ArgMax's i64 output, Gather's index dtype). Only bytes change
// on such a device, and the memory plan is where bytes are decided: each value's Location
// carries its storage dtype, sizes and offsets are computed from it, and the runtime converts at
// the host boundary (plan/storage.h). Kernel printers already load/store storage dtypes
// (codegen::Language::load/store).
#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "rlx/dtype.h"

namespace rlx::plan {

// logical dtype -> the dtype its elements are held as in device buffers (nullopt: the device
// cannot hold it). Indexed by DType.
struct StorageCaps {
  std::array<std::optional<DType>, std::size(kAllDTypes)> table = identity_table();

  std::optional<DType> storage(DType logical) const { return table[static_cast<size_t>(logical)]; }
  bool is_identity() const { return table == identity_table(); }

  // From a capability function `DType -> std::optional<DType>` (a kernel language's
  // storage_dtype), asked once per dtype.
  template <class F>
  static StorageCaps from(F&& storage_dtype) {
    StorageCaps c;
    for (DType t : kAllDTypes) c.table[static_cast<size_t>(t)] = storage_dtype(t);
    return c;
  }
  static constexpr std::array<std::optional<DType>, std::size(kAllDTypes)> identity_table() {
    std::array<std::optional<DType>, std::size(kAllDTypes)> t{};
    for (DType d : kAllDTypes) t[static_cast<size_t>(d)] = d;
    return t;
  }
};

struct DeviceLimits {
  std::string device;             // named in errors ("WebGPU", "Vulkan (llvmpipe)"); "" = "this device"
  int64_t alignment = 1;          // binding offset alignment (a power of two); slots and weights
                                  // start at multiples of max(PlanOptions::alignment, alignment)
  int64_t max_binding_bytes = 0;  // largest range one binding may address; 0 = no limit
  int64_t max_buffer_bytes = 0;   // largest buffer; the arena (and weights) split above it; 0 = no limit
  bool weights_arena = false;     // Params and Constants packed into weights buffers (Location::Kind::Weights)
  StorageCaps storage;            // storage dtype per logical dtype

  // The most bytes one value may take: min of the non-zero limits, or 0 (no limit).
  int64_t max_value_bytes() const;
  std::string device_name() const { return device.empty() ? "this device" : device; }
  // Throws rlx::Error naming the field when a limit is negative or the alignment not a power of two.
  void validate() const;
};

}  // namespace rlx::plan
