#pragma once
// The ahead-of-time web bundle (rlx export-web, CompiledGraph::export_web): a compiled WebGPU
// program written as files that a browser runs through navigator.gpu with no rlx runtime:
//   model.json   the program: buffers, WGSL kernels, the recorded commands, inputs and outputs
//   weights.bin  the initial bytes of params, constants and lookup tables, in storage dtypes
//   rlx-web.js   the ES module that loads and runs it (web/rlx-web.js, the same for every model)
//   index.html   a demo page: loads the model, runs it on random inputs, prints outputs and timing
// The WebGPU backend records the program (WebProgram); this file writes it. The format is
// described in docs/web-export.md.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rlx/dtype.h"
#include "rlx/session.h"
#include "rlx/tensor.h"

namespace rlx::web {

// What a device buffer holds.
enum class BufferRole { Arena, Input, Param, Constant, Scratch, Table, Flag };
const char* role_name(BufferRole r);

struct WebBuffer {
  BufferRole role = BufferRole::Arena;
  std::string name;  // Input/Param: the graph's name; otherwise what it is for
  uint64_t bytes = 0;
  // Input, Param, Constant: the logical dtype and dims, and the dtype the kernels store.
  DType dtype = DType::F32, storage = DType::F32;
  std::vector<int64_t> dims;
  std::vector<uint8_t> init;  // Constant, Table: the initial bytes (storage dtype)
};

enum class BindingKind : uint8_t { Read, ReadWrite, Uniform };

struct WebKernel {
  std::string name;
  std::string wgsl;
  std::vector<BindingKind> bindings;  // group 0, bindings 0.. in order; the last is the uniform
};

struct WebCommand {
  enum class Kind { Dispatch, Copy, Clear } kind = Kind::Dispatch;
  std::string label;  // "op:kernel"
  // Dispatch: the kernel, one buffer per binding but the last (the uniform), the uniform's
  // 32-bit words and the workgroup counts.
  int kernel = -1;
  std::vector<int> buffers;
  std::vector<uint32_t> uniform;
  uint32_t groups[3] = {1, 1, 1};
  // Copy: dst <- src; Clear: dst zeroed. Byte offsets and counts.
  int dst = -1, src = -1;
  uint64_t dst_offset = 0, src_offset = 0, bytes = 0;
};

struct WebOutput {
  std::string name;
  DType dtype = DType::F32, storage = DType::F32;
  std::vector<int64_t> dims;
  int buffer = -1;
  uint64_t offset = 0;
};

struct WebProgram {
  std::string target;  // the limits the kernels were compiled for
  std::vector<WebBuffer> buffers;
  std::vector<WebKernel> kernels;
  std::vector<WebCommand> commands;
  std::vector<WebOutput> outputs;
  int flag = -1;                          // the error-flag buffer (one i32)
  std::map<int, std::string> error_codes;  // the flag's values and their messages
};

// Writes `p` into folder `dir` (created when missing; files of the same names are replaced).
// `params`: the value of every Param buffer by name (host tensors in their logical dtype),
// converted to the buffer's storage dtype (an element that does not fit is an rlx::Error).
// Weights of logical dtype f16 / bf16 held in f32 words are written as their 2-byte values
// (exact); `f16_weights`: f32 ones too, rounded to f16 (WebExportOptions::f16_weights).
WebExportSummary write_web_bundle(const WebProgram& p, const std::map<std::string, Tensor>& params,
                                  const std::string& dir, bool f16_weights = false);

}  // namespace rlx::web
