#pragma once
// The size policy: caps that turn absurd or hostile sizes (a shape of 2^62 elements, a JSON
// document nested 100k deep, a loop without end) into an rlx::Error before any memory is
// reserved or any time is spent. One struct, enforced where sizes are decided:
//   - shape inference (every node's outputs), Tensor allocation, the memory plan: tensor
//     elements and bytes, with every product checked for int64 overflow;
//   - the JSON readers (graph JSON, safetensors headers) and ONNX subgraphs: nesting depth;
//   - While / ONNX Loop execution: iterations of a loop with no trip count of its own;
//   - ONNX recurrent ops unrolled at import: time steps.
// The defaults are process-wide; CompileOptions::limits and OnnxImportOptions::limits
// override them for one compile or import (see docs/development.md, "Size policy").
#include <cstdint>
#include <string>
#include <vector>

#include "rlx/dtype.h"

namespace rlx {

struct Limits {
  // Largest tensor (one value of one node, an input, a weight), in bytes and in elements.
  int64_t max_tensor_bytes = int64_t{1} << 40;     // 1 TiB
  int64_t max_tensor_elements = int64_t{1} << 40;  // 2^40 elements
  // Deepest nesting of a JSON document or of ONNX subgraphs (If / Loop / Scan bodies).
  int max_nesting_depth = 256;
  // Most iterations of a While whose max_iterations is 0 ("no limit of its own").
  int64_t max_loop_iterations = int64_t{1} << 24;  // 16M
  // Most iterations an ONNX Loop / Scan is unrolled into at import, and most time steps a
  // `recurrent` layer (RNN / GRU / LSTM) is unrolled into for a backend without its kernel.
  int64_t max_unroll_steps = 4096;

  // Throws rlx::Error naming the field when a limit is not positive.
  void validate() const;
};

// The limits in force on this thread: the innermost ScopedLimits, else the process defaults.
const Limits& active_limits();
// Replaces the process-wide defaults (validated).
void set_default_limits(const Limits& limits);

// Installs `limits` on this thread for its lifetime (compile and import do this with theirs).
class ScopedLimits {
 public:
  explicit ScopedLimits(const Limits& limits);
  ~ScopedLimits();
  ScopedLimits(const ScopedLimits&) = delete;
  ScopedLimits& operator=(const ScopedLimits&) = delete;

 private:
  Limits limits_;
  const Limits* previous_;
};

// a * b and a + b for non-negative sizes; rlx::Error naming `what` on int64 overflow.
int64_t checked_mul(int64_t a, int64_t b, const std::string& what);
int64_t checked_add(int64_t a, int64_t b, const std::string& what);

// Element count of `dims` (all >= 0), checked for overflow and against max_tensor_elements,
// and its byte count for `dtype` checked against max_tensor_bytes. `what` names the tensor
// ("node 12 (expand) output 0", "input 'x'") in the error, which also says how to raise the limit.
int64_t checked_numel(const std::vector<int64_t>& dims, const std::string& what);
int64_t checked_nbytes(const std::vector<int64_t>& dims, DType dtype, const std::string& what);

}  // namespace rlx
