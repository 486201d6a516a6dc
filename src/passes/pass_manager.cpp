#include <algorithm>
#include <chrono>
#include <cstdio>

#include "passes/pass.h"
#include "runtime/backend.h"
#include "runtime/knobs.h"

namespace rlx::passes {

bool PassContext::claims_kind(std::string_view kind) const { return !backend || backend->claims_kind(kind); }

PassContext PassContext::from_knobs(const Backend* backend, const ResolvedKnobs& knobs) {
  PassContext c;
  c.backend = backend;
  c.attention_threshold = knobs.fuse_attn_threshold();
  return c;
}

PassManager& PassManager::add(Pass p) {
  passes_.push_back(std::move(p));
  return *this;
}

void PassManager::disable(const std::vector<std::string>& names) {
  for (const auto& n : names) {
    const bool known = std::any_of(passes_.begin(), passes_.end(), [&](const Pass& p) { return p.name == n; });
    if (!known) {
      std::string list;
      for (const auto& p : passes_) list += (list.empty() ? "" : ", ") + p.name;
      throw Error("unknown pass '" + n + "' (passes: " + list + ")");
    }
    disabled_.push_back(n);
  }
}

size_t op_count(const Graph& g) {
  size_t n = 0;
  for (const Node& node : g.nodes())
    if (!is_leaf_op(node.op)) ++n;
  return n;
}

Graph PassManager::run(Graph g, const PassContext& ctx, std::vector<PassStat>* stats) const {
  using Clock = std::chrono::steady_clock;
  for (const Pass& p : passes_) {
    PassStat st;
    st.name = p.name;
    st.nodes_before = op_count(g);
    if (std::find(disabled_.begin(), disabled_.end(), p.name) != disabled_.end()) {
      st.skipped = true;
      st.reason = "disabled";
    } else {
      for (const auto& kind : p.produces)
        if (!ctx.claims_kind(kind)) {
          st.skipped = true;
          st.reason = "backend does not claim " + kind;
          break;
        }
    }
    if (!st.skipped) {
      const auto t0 = Clock::now();
      g = p.run(g, ctx);
      st.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (verify_) {
        auto problems = g.verify_report();
        if (!problems.empty()) {
          std::string msg = "pass '" + p.name + "' produced an invalid graph (an optimizer bug; disable the pass "
                            "with CompileOptions.disabled_passes to work around it):";
          for (const auto& pr : problems) msg += "\n  " + pr;
          throw Error(msg);
        }
      }
    }
    st.nodes_after = op_count(g);
    if (stats) stats->push_back(std::move(st));
  }
  return g;
}

std::string format_report(const std::vector<PassStat>& stats) {
  std::string out = "pass                          ms     ops before -> after\n";
  double total = 0;
  char line[256];
  for (const auto& s : stats) {
    total += s.ms;
    if (s.skipped)
      std::snprintf(line, sizeof line, "%-26s %8s     skipped (%s)\n", s.name.c_str(), "-", s.reason.c_str());
    else
      std::snprintf(line, sizeof line, "%-26s %8.3f     %zu -> %zu\n", s.name.c_str(), s.ms, s.nodes_before,
                    s.nodes_after);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-26s %8.3f\n", "total", total);
  out += line;
  return out;
}

}  // namespace rlx::passes
