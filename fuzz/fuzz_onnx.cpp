// libFuzzer target: ONNX import of arbitrary bytes. rlx::Error is the expected outcome for
// bad input; any other exception, crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>

#include "rlx/onnx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const rlx::Graph g = rlx::import_onnx_bytes(data, size, "");
    (void)g.size();
  } catch (const rlx::Error&) {
  }
  return 0;
}
