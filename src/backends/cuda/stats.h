#pragma once
// Process-wide counters of the CUDA backend (for tests and benchmarks).
#include <cstdint>

namespace rlx::cuda {

struct RunStats {
  uint64_t graph_captures = 0;  // schedules captured into a CUDA graph
  uint64_t graph_replays = 0;   // runs that launched an already captured graph
  uint64_t eager_runs = 0;      // runs issued launch by launch (graphs disabled)
  uint64_t param_uploads = 0;   // times a variant uploaded its params
  // Device time of the last run's schedule (CUDA events around the graph launch or the eager
  // launches; input/output copies excluded), in milliseconds.
  double last_device_ms = 0;
};

RunStats run_stats();

}  // namespace rlx::cuda
