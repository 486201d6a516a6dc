#pragma once
// A compiled shape binding on the GPU: its Schedule lowered to fixed launches, one
// non-blocking stream, a device arena sized by the memory plan, device copies of the leaves
// (params uploaded once per params generation, constants at prepare, inputs every run through
// pinned staging), and a CUDA graph captured at the first run and replayed afterwards.
#include <memory>

#include "rlx/graph.h"
#include "rlx/session.h"
#include "runtime/backend.h"

namespace rlx::cuda {

std::unique_ptr<Variant> make_cuda_variant(Graph g, const CompileOptions& options);

}  // namespace rlx::cuda
