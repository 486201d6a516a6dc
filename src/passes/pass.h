#pragma once
// Passes and the pass manager.
//
// A pass is a named function Graph -> Graph (through the Rewriter). Fusion passes declare the
// fused op kinds they create; the manager skips them when the target backend does not claim
// every one of those kinds. After each pass the manager can verify the graph (on by default in
// builds without NDEBUG, and in tests) and records the time and node counts for the report.
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/graph.h"

namespace rlx {
class Backend;
class ResolvedKnobs;
}

namespace rlx::passes {

struct PassContext {
  const Backend* backend = nullptr;  // null: every op kind is claimed
  // fuse_attention_block fires only when batch * seq <= this (knob fuse_attn_threshold).
  int64_t attention_threshold = 64;
  bool claims_kind(std::string_view kind) const;
  // The context of one compile: its backend and the knobs' values (runtime/knobs.h).
  static PassContext from_knobs(const Backend* backend, const ResolvedKnobs& knobs);
};

struct Pass {
  std::string name;
  std::function<Graph(const Graph&, const PassContext&)> run;
  std::vector<std::string> produces;  // fused op kinds it creates
};

struct PassStat {
  std::string name;
  double ms = 0;
  size_t nodes_before = 0, nodes_after = 0;
  bool skipped = false;
  std::string reason;  // why it was skipped
};

class PassManager {
 public:
  PassManager& add(Pass p);
  void set_verify(bool on) { verify_ = on; }
  // Skips these passes (names must be known to this manager: rlx::Error otherwise).
  void disable(const std::vector<std::string>& names);
  const std::vector<Pass>& passes() const { return passes_; }

  Graph run(Graph g, const PassContext& ctx, std::vector<PassStat>* stats = nullptr) const;

 private:
  std::vector<Pass> passes_;
  std::vector<std::string> disabled_;
#ifdef NDEBUG
  bool verify_ = false;
#else
  bool verify_ = true;
#endif
};

// The per-pass table: one line per pass with time, node counts and skip reasons, and a total.
std::string format_report(const std::vector<PassStat>& stats);

// Number of non-leaf nodes (Input/Param/Constant excluded) of `g`: the "node count" reported.
size_t op_count(const Graph& g);

}  // namespace rlx::passes
