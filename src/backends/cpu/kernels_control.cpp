// CPU kernels for If and While. Branches and loop bodies run through ctx.run_subgraph
// (provided by the executor); the results are copied into the preallocated outputs.
//
// While semantics: before each iteration the cap is checked (max_iterations > 0 and that many
// body runs done -> stop; max_iterations == 0 means no cap of its own: the size policy's
// Limits::max_loop_iterations then bounds it, and reaching that is an error), then cond is evaluated on the
// carried values (false -> stop), then body replaces the carried values. The outputs are the
// final carried values (the inputs themselves when the loop runs zero times).
#include <cstring>

#include "backends/cpu/kernels.h"

namespace rlx::cpu {
namespace {

bool read_bool_scalar(const Tensor& t, const std::string& what) {
  check(t.dtype() == DType::Bool && t.numel() == 1,
        what + " must be one bool value, got " + t.shape_info().str());
  return static_cast<const uint8_t*>(t.raw())[0] != 0;
}

// Subgraph results may be views into the runner's scratch memory; own them before they are
// fed back into another subgraph run.
std::vector<Tensor> owned(std::vector<Tensor> ts) {
  for (Tensor& t : ts)
    if (t.is_borrowed()) t = t.clone();
  return ts;
}

void check_results(const std::vector<Tensor>& results, std::span<const Tensor> expected, const std::string& what) {
  check(results.size() == expected.size(), what + " returned " + std::to_string(results.size()) + " values, expected " +
                                               std::to_string(expected.size()));
  for (size_t i = 0; i < results.size(); ++i) {
    const Tensor& r = results[i];
    check(r.dtype() == expected[i].dtype() && r.shape() == expected[i].shape(),
          what + " output " + std::to_string(i) + " is " + r.shape_info().str() + ", expected " +
              expected[i].shape_info().str());
  }
}

void copy_out(const std::vector<Tensor>& results, std::span<Tensor> out) {
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].nbytes() > 0 && out[i].raw() != results[i].raw())
      std::memmove(out[i].raw(), results[i].raw(), out[i].nbytes());
}

}  // namespace

void kernel(const ops::If& op, KernelContext& ctx) {
  const bool cond = read_bool_scalar(ctx.in[0], "if: the condition");
  const Graph& branch = cond ? *op.then_branch : *op.else_branch;
  std::vector<Tensor> operands(ctx.in.begin() + 1, ctx.in.end());
  std::vector<Tensor> results = ctx.run_subgraph(branch, operands);
  check_results(results, ctx.out, cond ? "if: then_branch" : "if: else_branch");
  copy_out(results, ctx.out);
}

void kernel(const ops::While& op, KernelContext& ctx) {
  std::vector<Tensor> carried(ctx.in.begin(), ctx.in.end());
  for (int64_t iter = 0;; ++iter) {
    if (op.max_iterations > 0 && iter >= op.max_iterations) break;
    if (op.max_iterations == 0 && iter >= ctx.limits.max_loop_iterations)
      throw Error("while: the condition was still true after " + std::to_string(iter) +
                  " iterations, the limit for loops without a trip count of their own "
                  "(rlx::Limits::max_loop_iterations; set max_iterations on the loop or raise the limit "
                  "through CompileOptions::limits)");
    std::vector<Tensor> c = ctx.run_subgraph(*op.cond, carried);
    check(c.size() == 1, "while: cond returned " + std::to_string(c.size()) + " values, expected 1");
    if (!read_bool_scalar(c[0], "while: cond's result")) break;
    std::vector<Tensor> next = owned(ctx.run_subgraph(*op.body, carried));
    check_results(next, ctx.in, "while: body (iteration " + std::to_string(iter) + ")");
    carried = std::move(next);
  }
  copy_out(carried, ctx.out);
}

}  // namespace rlx::cpu
