#pragma once
// A decode loop over a carried KV cache, shared by the backends' in-place tests: the graph
// (cache (1, max_ctx, 2, 4) f32 -> [rows * 2, the cache with `rows` written at `pos`]) and a run
// of it with the cache carried by bind_state; and the small graphs of their claim / error tests.
#include <cstdint>
#include <functional>
#include <vector>

#include "rlx/session.h"

namespace rlx::testing {

Graph kv_decode_graph(int64_t max_ctx);

// Compiles kv_decode_graph(max_ctx) for `device`, runs step 0 with the caller's cache and 8
// steps with it carried, then reads the cache back. EXPECTs that the caller's tensor is unchanged
// and that the cache holds the caller's rows with every written one. Returns the growth of
// `counter` (a byte counter) per carried step.
uint64_t run_carried_cache_steps(Device device, int64_t max_ctx, const std::function<uint64_t()>& counter);

// For a device backend: at max_ctx 256 and 4096, EXPECTs that carried steps copy no cache bytes
// between runs (device_stats) and that the variant records no copy of the cache
// (`recorded_copy_bytes`: the backend's counter of the copies its schedules record).
void expect_carried_cache_in_place(Device device, const std::function<uint64_t()>& recorded_copy_bytes);

// Keys rotated by a RoPE and cached, and values cached at the same positions (2 batches of 3
// rows, 2 KV heads of 16, caches of 24 rows): a decoder's cache writes.
struct RopeCacheCase {
  RopeStyle style = RopeStyle::NeoX;
  int64_t n_rot = 16;  // below 16: a partial rotation
  bool per_batch = false;  // tables per batch and row
  DType t = DType::F32;
  bool q = false;  // also a q input (4 heads) rotated alike, a third output
};
Graph rope_cache_write_graph(const RopeCacheCase& c);
// NeoX and GPT-J pairs, a partial rotation, per-batch tables, f32 and bf16, with and without q.
std::vector<RopeCacheCase> rope_cache_cases();
// For each case and each mode 0 .. modes - 1 (`configure` sets the options of a mode), EXPECTs
// that `device` writes the caches the CPU writes: the rotated keys within f32 rounding (bf16:
// within one bf16 step), the values exactly.
void expect_rope_cache_writes_match_cpu(Device device, int modes,
                                        const std::function<void(CompileOptions&, int)>& configure);

// cache (1, 64, 2, 8) f32 with rows (1, 3, 2, 8) written at pos (3) i64: one cache_write.
Graph cache_write_graph();
// The first node of op `name` in g (rlx::Error when there is none).
const Node& first_node_of(const Graph& g, const char* name);

}  // namespace rlx::testing
