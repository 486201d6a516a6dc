#pragma once
// A decode loop over a carried KV cache, shared by the CPU and CUDA in-place tests: the graph
// (cache (1, max_ctx, 2, 4) f32 -> [rows * 2, the cache with `rows` written at `pos`]) and a run
// of it with the cache carried by bind_state.
#include <cstdint>
#include <functional>

#include "rlx/session.h"

namespace rlx::testing {

Graph kv_decode_graph(int64_t max_ctx);

// Compiles kv_decode_graph(max_ctx) for `device`, runs step 0 with the caller's cache and 8
// steps with it carried, then reads the cache back. EXPECTs that the caller's tensor is unchanged
// and that the cache holds the caller's rows with every written one. Returns the growth of
// `counter` (a byte counter) per carried step.
uint64_t run_carried_cache_steps(Device device, int64_t max_ctx, const std::function<uint64_t()>& counter);

}  // namespace rlx::testing
