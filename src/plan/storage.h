#pragma once
// Host tensors <-> device storage bytes, for values whose storage dtype differs from their
// logical dtype (plan/device_limits.h: e.g. i64 held as i32, bool/u8 as u32 words, f16/bf16
// as f32 words on WebGPU). The runtime calls to_storage when it uploads an Input, Param or
// Constant and from_storage when it reads back an output; both check every element, so a
// narrowing that would change a value is an rlx::Error, never a silent wrap.
//
// Conversions: between integer dtypes and bool (range-checked; a bool stored in a wider word
// reads back as nonzero -> true), and between float dtypes (widening is exact; narrowing rounds
// to nearest even and a finite value that overflows to infinity is an error). Float <-> integer
// is not a storage mapping and throws.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "rlx/tensor.h"

namespace rlx::plan {

// True when some value of `logical` cannot be held exactly in `storage` (i64 -> i32, u32 -> i32,
// f32 -> f16, ...): such leaves and outputs are listed in MemoryPlan::narrowed.
bool storage_narrows(DType logical, DType storage);

// Bytes of `n` elements of `storage`, checked for overflow ("what" names the tensor).
int64_t storage_bytes(int64_t n, DType storage, const std::string& what);

// `host` (its own dtype) converted to `storage` elements written to `dst` (exactly
// numel * dtype_size(storage) bytes). rlx::Error naming `what` (e.g. "input 'ids'"), the
// offending element's index and value when it does not fit.
void to_storage(const Tensor& host, DType storage, std::span<uint8_t> dst, const std::string& what);
std::vector<uint8_t> to_storage(const Tensor& host, DType storage, const std::string& what);

// `src` (numel(dims) elements of `storage`) converted to a host tensor of dtype `logical`.
Tensor from_storage(std::span<const uint8_t> src, DType storage, DType logical, const std::vector<int64_t>& dims,
                    const std::string& what);

}  // namespace rlx::plan
