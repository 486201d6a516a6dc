// libFuzzer target: rlx graph JSON of arbitrary text, imported, then compiled and run on the
// CPU under the fuzz size policy (fuzz_run.h) with generated inputs and params. rlx::Error is
// the expected outcome for bad input; any other exception, crash, hang, leak or sanitizer
// report is a bug. `data_file` references resolve against an empty scratch folder.
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "fuzz_run.h"
#include "rlx/serialize.h"

namespace {
std::string g_base_dir = ".";
char g_dir_template[] = "/tmp/rlx_fuzz_json_XXXXXX";
void remove_base_dir() { ::rmdir(g_dir_template); }
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  rlx::fuzz::install_fuzz_limits();
  if (::mkdtemp(g_dir_template) != nullptr) {
    g_base_dir = g_dir_template;
    std::atexit(remove_base_dir);
  } else {
    std::perror("fuzz_json: mkdtemp");
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return rlx::fuzz::guarded("fuzz_json", [&] {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const rlx::Graph g = rlx::graph_from_json(text, g_base_dir);
    rlx::fuzz::Rng rng(data, size);
    rlx::fuzz::compile_and_run(g, rng);
  });
}
