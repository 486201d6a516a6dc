// libFuzzer target: safetensors parsing and tensor extraction of arbitrary bytes.
// rlx::Error is the expected outcome for bad input; any other exception, crash or sanitizer
// report is a bug.
#include <cstddef>
#include <cstdint>

#include "fuzz_run.h"
#include "rlx/safetensors.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  rlx::fuzz::install_fuzz_limits();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return rlx::fuzz::guarded("fuzz_safetensors", [&] {
    const auto f = rlx::SafetensorsFile::from_bytes(data, size);
    (void)f.metadata().size();
    for (const auto& e : f.entries()) {
      (void)f.raw(e.name).size();
      const rlx::Tensor t = f.tensor(e.name);
      (void)t.summary();
    }
  });
}
