#pragma once
// Process-wide counters of the CUDA backend (for tests and benchmarks).
#include <cstdint>
#include <string>

namespace rlx::cuda {

struct RunStats {
  uint64_t graph_captures = 0;  // schedules captured into a CUDA graph
  uint64_t graph_replays = 0;   // runs that launched an already captured graph
  uint64_t eager_runs = 0;      // runs issued launch by launch (graphs disabled)
  uint64_t param_uploads = 0;   // times a variant uploaded its params (rlx::device_stats())
  uint64_t packed_weights = 0;  // weight regions variants keep packed for the GEMV (at prepare)
  uint64_t dropped_leaves = 0;  // params/constants kept only packed, not as stored (at prepare)
  // Device time of the last run's schedule (CUDA events around the graph launch or the eager
  // launches; input/output copies excluded), in milliseconds (rlx::device_stats()). Host <->
  // device transfers are counted by the shared device runtime: rlx::device_stats().
  double last_device_ms = 0;
};

RunStats run_stats();

// With RLX_CUDA_PROFILE=1 runs are issued eagerly with an event pair around every launch group
// and the device time is summed per op kind; this returns the table (largest first) and clears it.
std::string take_profile_report();

}  // namespace rlx::cuda
