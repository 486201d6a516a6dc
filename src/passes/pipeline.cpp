#include "passes/pipeline.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "passes/canonical.h"
#include "passes/fusion.h"
#include "passes/legalize.h"
#include "passes/lower.h"

namespace rlx::passes {
namespace {

PassManager production_pipeline() {
  PassManager pm;
  pm.add({"lower_control_flow", lower_control_flow, {}})
      .add({"lower_dot_general", lower_dot_general, {"matmul", "transpose", "reshape"}})
      .add({"fold_constants", fold_constants, {}})
      .add({"cse", cse, {}})
      .add({"remove_trivial_ops", remove_trivial_ops, {}})
      .add({"fuse_matmul_bias_act", fuse_matmul_bias_act, {"fused_matmul_bias_act"}})
      .add({"fuse_residual_ln", fuse_residual_ln, {"fused_residual_ln"}})
      .add({"fuse_residual_rms_norm", fuse_residual_rms_norm, {"fused_residual_rms_norm"}})
      .add({"fuse_rms_norm_reshape", fuse_rms_norm_reshape, {"rms_norm", "reshape"}})
      .add({"fuse_swiglu_dual_matmul", fuse_swiglu_dual_matmul, {"fused_swiglu", "concat", "matmul"}})
      .add({"fuse_shared_input_matmul", fuse_shared_input_matmul, {"concat", "matmul", "narrow"}})
      .add({"fuse_swiglu", fuse_swiglu, {"fused_swiglu"}})
      .add({"fuse_attention_block", fuse_attention_block, {"fused_attention_block"}})
      .add({"fuse_transformer_layer", fuse_transformer_layer, {"fused_transformer_layer"}})
      .add({"fuse_matmul_residual", fuse_matmul_residual, {"fused_matmul_bias_act"}})
      .add({"mark_elementwise_regions", mark_elementwise_regions, {"elementwise_region"}})
      .add({"dce", dce, {}});
  return pm;
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

}  // namespace

std::vector<std::string> pipeline_pass_names() {
  std::vector<std::string> names;
  const PassManager pm = production_pipeline();  // kept alive: passes() refers into it
  for (const auto& p : pm.passes()) names.push_back(p.name);
  names.push_back("legalize");
  return names;
}

void check_pass_names(const std::vector<std::string>& names) {
  PassManager pm = production_pipeline();
  for (const auto& n : names)
    if (n == "legalize")
      throw Error("pass 'legalize' cannot be disabled: it is what makes the graph runnable on the backend");
  pm.disable(names);
}

// Pass names from RLX_DISABLE_PASSES (comma-separated), for experiments without a rebuild.
static std::vector<std::string> env_disabled_passes() {
  std::vector<std::string> out;
  const char* v = std::getenv("RLX_DISABLE_PASSES");
  if (!v) return out;
  std::string cur;
  for (const char* p = v;; ++p) {
    if (*p == ',' || *p == '\0') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
      if (*p == '\0') break;
    } else if (*p != ' ') {
      cur += *p;
    }
  }
  return out;
}

Graph optimize(const Graph& g, const Backend& backend, const CompileOptions& options, std::vector<PassStat>* stats) {
  const PassContext ctx = PassContext::from_env(&backend);
  PassManager pm = production_pipeline();
  pm.set_verify(options.verify);
  pm.disable(options.disabled_passes);
  try {
    pm.disable(env_disabled_passes());
  } catch (const Error& e) {
    throw Error(std::string("RLX_DISABLE_PASSES: ") + e.what());
  }
  return pm.run(g, ctx, stats);
}

Graph optimize_for_backend(const Graph& g, const Backend& backend, const CompileOptions& options) {
  std::vector<PassStat> stats;
  Graph cur = options.optimize ? optimize(g, backend, options, &stats) : g;
  PassStat st;
  st.name = "legalize";
  st.nodes_before = op_count(cur);
  const auto t0 = std::chrono::steady_clock::now();
  const ClaimFn claims = [&backend](const Graph& gr, const Node& n) { return backend.claims(gr, n); };
  const ReasonFn why = [&backend](const Graph& gr, const Node& n) { return backend.unclaimed_reason(gr, n); };
  cur = legalize(cur, claims, device_name(backend.device()), why);
  st.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  st.nodes_after = op_count(cur);
  stats.push_back(st);
  if (options.pass_report || env_flag("RLX_PASS_REPORT"))
    std::fprintf(stderr, "rlx pass report (%s, %zu ops in):\n%s", device_name(backend.device()), op_count(g),
                 format_report(stats).c_str());
  return cur;
}

void check_legalizable(const Graph& g, const Backend& backend) {
  const ClaimFn claims = [&backend](const Graph& gr, const Node& n) { return backend.claims(gr, n); };
  const ReasonFn why = [&backend](const Graph& gr, const Node& n) { return backend.unclaimed_reason(gr, n); };
  (void)legalize(g, claims, device_name(backend.device()), why);
}

}  // namespace rlx::passes
