// libFuzzer target: .npy reading of arbitrary bytes (rlx::load_npy reads a path, so each input
// is written to a scratch file first). rlx::Error is the expected outcome for bad input; any
// other exception, crash or sanitizer report is a bug.
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "fuzz_run.h"
#include "rlx/serialize.h"

namespace {
std::string g_path;
void remove_scratch() { ::unlink(g_path.c_str()); }
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  rlx::fuzz::install_fuzz_limits();
  char tmpl[] = "/tmp/rlx_fuzz_npy_XXXXXX";
  const int fd = ::mkstemp(tmpl);
  if (fd < 0) {
    std::perror("fuzz_npy: mkstemp");
    std::abort();
  }
  ::close(fd);
  g_path = tmpl;
  std::atexit(remove_scratch);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(g_path.c_str(), "wb");
  if (f == nullptr || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) {
    std::perror("fuzz_npy: writing the scratch file");
    std::abort();
  }
  return rlx::fuzz::guarded("fuzz_npy", [&] {
    const rlx::Tensor t = rlx::load_npy(g_path);
    (void)t.summary();
  });
}
