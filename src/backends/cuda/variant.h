#pragma once
// A compiled shape binding on the GPU: the shared device runtime (runtime/device_variant.h:
// arena, leaf buffers, param uploads per generation, input staging, readback of the requested
// outputs, carried state on the device, the error flag) over CudaDevice (cuda_device.h: one
// non-blocking stream, pinned staging), with the Schedule lowered to fixed launches that are
// captured into a CUDA graph at the first run and replayed afterwards.
#include <memory>

#include "rlx/graph.h"
#include "rlx/session.h"
#include "runtime/backend.h"

namespace rlx::cuda {

std::unique_ptr<Variant> make_cuda_variant(Graph g, const CompileOptions& options);

}  // namespace rlx::cuda
