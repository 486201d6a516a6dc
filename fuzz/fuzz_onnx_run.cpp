// libFuzzer target: ONNX import of arbitrary bytes, then compile and run on the CPU under the
// fuzz size policy (fuzz_run.h) with generated inputs. rlx::Error is the expected outcome for
// bad input; any other exception, crash, hang, leak or sanitizer report is a bug.
#include <onnx/onnx_pb.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "fuzz_run.h"
#include "rlx/onnx.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  rlx::fuzz::install_fuzz_limits();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return rlx::fuzz::guarded("fuzz_onnx_run", [&] {
    rlx::fuzz::Rng rng(data, size);
    rlx::OnnxImportOptions opts;
    opts.limits = rlx::fuzz::fuzz_limits();
    std::map<std::string, int64_t> syms;
    // Half of the runs bind the graph inputs' symbolic dims at import (shape computations over
    // them fold), the other half leave them symbolic until run time.
    if (rng.below(2) == 0) {
      onnx::ModelProto model;
      if (size <= static_cast<size_t>(INT32_MAX) && model.ParseFromArray(data, static_cast<int>(size))) {
        for (const auto& in : model.graph().input()) {
          if (!in.type().has_tensor_type()) continue;
          for (const auto& d : in.type().tensor_type().shape().dim())
            if (d.has_dim_param() && !d.dim_param().empty() && !syms.count(d.dim_param()))
              syms.emplace(d.dim_param(), rlx::fuzz::small_dim(rng));
        }
      }
      opts.dims = syms;
    }
    const rlx::Graph g = rlx::import_onnx_bytes(data, size, "", opts);
    rlx::fuzz::compile_and_run(g, rng, syms);
  });
}
