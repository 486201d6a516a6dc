#include "passes/pipeline.h"

#include <chrono>
#include <cstdio>

#include "passes/canonical.h"
#include "passes/exporter.h"
#include "passes/fusion.h"
#include "passes/legalize.h"
#include "passes/lower.h"
#include "runtime/knobs.h"

namespace rlx::passes {
namespace {

PassManager production_pipeline() {
  PassManager pm;
  pm.add({"lower_control_flow", lower_control_flow, {}})
      .add({"lower_dot_general", lower_dot_general, {"matmul", "transpose", "reshape"}})
      .add({"lower_recurrent", lower_recurrent, {}})
      .add({"fold_constants", fold_constants, {}})
      .add({"cse", cse, {}})
      .add({"remove_trivial_ops", remove_trivial_ops, {}})
      // Exporter patterns (exporter.h) first: the fusions below consume what they create.
      .add({"fold_conv_affine", fold_conv_affine, {"conv"}})
      .add({"fuse_gelu", fuse_gelu, {"activation"}})
      .add({"fuse_silu", fuse_silu, {"activation"}})
      .add({"fuse_layer_norm", fuse_layer_norm, {"layer_norm"}})
      .add({"fuse_rms_norm", fuse_rms_norm, {"rms_norm"}})
      .add({"fuse_attention", fuse_attention, {"attention"}})
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

namespace {

Graph optimize_with(const Graph& g, const Backend& backend, const CompileOptions& options, const ResolvedKnobs& knobs,
                    std::vector<PassStat>* stats) {
  const PassContext ctx = PassContext::from_knobs(&backend, knobs);
  PassManager pm = production_pipeline();
  pm.set_verify(options.verify);
  pm.disable(options.disabled_passes);
  try {
    pm.disable(knobs.disable_passes());
  } catch (const Error& e) {
    throw Error(knobs.origin("disable_passes") + ": " + e.what());
  }
  return pm.run(g, ctx, stats);
}

}  // namespace

Graph optimize(const Graph& g, const Backend& backend, const CompileOptions& options, std::vector<PassStat>* stats) {
  return optimize_with(g, backend, options, resolve_knobs(options), stats);
}

Graph optimize_for_backend(const Graph& g, const Backend& backend, const CompileOptions& options) {
  const ResolvedKnobs knobs = resolve_knobs(options);
  std::vector<PassStat> stats;
  Graph cur = options.optimize ? optimize_with(g, backend, options, knobs, &stats) : g;
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
  if (knobs.pass_report())
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
