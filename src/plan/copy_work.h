#pragma once
// The backend-neutral description of a Copy-family step (plan/step_family.h): which kind of data
// movement it is and, for strided and contiguous moves, their element geometry. A GPU backend's
// copy lowering switches on it and keeps only its kernels and dispatch code. Also the copy
// claim checks and the 32-bit index checks the shader-language backends share.
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "plan/schedule.h"
#include "rlx/graph.h"

namespace rlx::plan {

// out (dense, `dims`) = in[in_offset + sum c_d * strides[d]] (a CopyGeom, or a Narrow of
// several outer rows as 2 dims).
struct StridedCopyWork {
  std::vector<int64_t> dims, strides;
  int64_t in_offset = 0;
};
// out = `count` contiguous input elements from element `start` on (a Narrow of one outer row).
struct ContiguousCopyWork {
  int64_t start = 0, count = 0;
};
struct ConcatCopyWork {};  // the step's ConcatGeom
struct GatherCopyWork {};  // the step's AxisGeom
struct PadCopyWork {       // the step's op
  const ops::Pad* op = nullptr;
};
using CopyWork = std::variant<StridedCopyWork, ContiguousCopyWork, ConcatCopyWork, GatherCopyWork, PadCopyWork>;

// The work of Copy step `st` (its op outlives the result). Throws rlx::Error naming the node for
// an op that is no data movement (`backend`, e.g. "Vulkan", names whose).
CopyWork copy_work(const Step& st, std::string_view backend);

// The op kinds the copy kernels take.
bool copy_claims_kind(std::string_view op_name);
// A Gather's indices are an integer dtype (i8..i64, u8, u32); other nodes pass. `backend` starts
// the refusal.
bool copy_claims_gather_indices(const Graph& g, const Node& n, std::string_view backend, std::string* why);
bool copy_index_dtype(DType t);

// v as a 32-bit size / element count, or rlx::Error starting with `what` when it is negative or
// 2^31 or more (the `backend`'s kernels index with 32 bits).
uint32_t index_u32(int64_t v, const std::string& what, std::string_view backend);
// v as the bits of a 32-bit signed element offset, or rlx::Error when it does not fit.
uint32_t index_i32_bits(int64_t v, const std::string& what, std::string_view backend);

// The source table of a Pad kernel (PadGeom): rank, then out_dims, in_strides (i32 bits),
// source_offset and the per-axis source indices (i32 bits); rlx::Error starting with `what`
// for a value that does not fit 32 bits.
std::vector<uint32_t> pad_table_words(const PadGeom& pg, const std::string& what, std::string_view backend);

}  // namespace rlx::plan
