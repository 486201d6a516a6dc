// libFuzzer target: safetensors parsing and tensor extraction of arbitrary bytes.
// rlx::Error is the expected outcome for bad input; anything else is a bug.
#include <cstddef>
#include <cstdint>

#include "rlx/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto f = rlx::SafetensorsFile::from_bytes(data, size);
    for (const auto& e : f.entries()) (void)f.tensor(e.name).numel();
  } catch (const rlx::Error&) {
  }
  return 0;
}
