// libFuzzer target: ONNX import of arbitrary bytes (import only; fuzz_onnx_run also runs the
// graph). rlx::Error is the expected outcome for bad input; any other exception, crash or
// sanitizer report is a bug.
#include <cstddef>
#include <cstdint>

#include "fuzz_run.h"
#include "rlx/onnx.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  rlx::fuzz::install_fuzz_limits();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return rlx::fuzz::guarded("fuzz_onnx", [&] {
    rlx::OnnxImportOptions opts;
    opts.limits = rlx::fuzz::fuzz_limits();
    const rlx::Graph g = rlx::import_onnx_bytes(data, size, "", opts);
    (void)g.verify_report();
  });
}
