// CPU kernel for ElementwiseRegion: evaluates the step chain over blocks of kBlock output
// elements. Each block gathers its broadcast inputs into small buffers (inputs with the
// output's layout are read in place, scalars are filled once), runs every step as one
// span call into a per-step buffer (the last step writes the output directly), so the
// dtype/kind dispatch happens once per step and block rather than per element.
// Step semantics are those of the standalone ops (kernels_elementwise/activation/cast.cpp).
#include <string>
#include <vector>

#include "backends/cpu/elementwise_core.h"
#include "backends/cpu/kernels.h"

namespace rlx::cpu {
namespace {

constexpr int64_t kBlock = 1024;

enum class InMode { Direct, Scalar, Gather };

std::string step_label(const ops::RegionStep& s, size_t i) {
  std::string op;
  switch (s.kind) {
    case RegionStepKind::Binary: op = enum_name(static_cast<BinaryKind>(s.op)); break;
    case RegionStepKind::Compare: op = enum_name(static_cast<CompareKind>(s.op)); break;
    case RegionStepKind::Activation: op = enum_name(static_cast<ActKind>(s.op)); break;
    case RegionStepKind::Cast: op = std::string("to ") + dtype_name(s.to); break;
    case RegionStepKind::Where: break;
  }
  return "elementwise_region step " + std::to_string(i) + " (" + enum_name(s.kind) + (op.empty() ? "" : " ") + op +
         ")";
}

}  // namespace

void kernel(const ops::ElementwiseRegion& op, KernelContext& ctx) {
  Tensor& out = ctx.out[0];
  const int64_t n = out.numel();
  if (n == 0) return;
  const size_t n_in = ctx.in.size();
  const size_t n_steps = op.steps.size();
  if (n_steps == 0) throw Error("elementwise_region: no steps");

  // Result dtype of every step (inference validated the chain).
  std::vector<DType> sdt(n_steps);
  auto arg_dtype = [&](int32_t a) { return a >= 0 ? ctx.in[static_cast<size_t>(a)].dtype() : sdt[static_cast<size_t>(-a - 1)]; };
  for (size_t s = 0; s < n_steps; ++s) {
    const ops::RegionStep& st = op.steps[s];
    const size_t arity = st.kind == RegionStepKind::Where ? 3
                         : (st.kind == RegionStepKind::Binary || st.kind == RegionStepKind::Compare) ? 2 : 1;
    if (st.args.size() != arity)
      throw Error(step_label(st, s) + ": expects " + std::to_string(arity) + " arguments, got " +
                  std::to_string(st.args.size()));
    for (int32_t a : st.args)
      if (a >= static_cast<int32_t>(n_in) || (a < 0 && static_cast<size_t>(-a - 1) >= s))
        throw Error(step_label(st, s) + ": argument " + std::to_string(a) + " does not refer to an input or an earlier step");
    switch (st.kind) {
      case RegionStepKind::Binary: sdt[s] = arg_dtype(st.args.at(0)); break;
      case RegionStepKind::Compare: sdt[s] = DType::Bool; break;
      case RegionStepKind::Activation: sdt[s] = arg_dtype(st.args.at(0)); break;
      case RegionStepKind::Cast: sdt[s] = st.to; break;
      case RegionStepKind::Where: sdt[s] = arg_dtype(st.args.at(1)); break;
    }
  }
  if (sdt.back() != out.dtype())
    throw Error("elementwise_region: last step yields " + std::string(dtype_name(sdt.back())) + " but the output is " +
                out.shape_info().str());

  std::vector<InMode> mode(n_in);
  std::vector<BroadcastPlan<1>> plans(n_in);
  for (size_t i = 0; i < n_in; ++i) {
    const Tensor& t = ctx.in[i];
    if (t.numel() == n) mode[i] = InMode::Direct;
    else if (t.numel() == 1) mode[i] = InMode::Scalar;
    else {
      mode[i] = InMode::Gather;
      plans[i] = make_plan<1>(out.shape(), {&t.shape()});
    }
  }

  const int64_t n_blocks = (n + kBlock - 1) / kBlock;
  parallel_for(n_blocks, std::max<int64_t>(1, kElementwiseGrain / kBlock), [&](int64_t bb, int64_t be) {
    // Buffers of one block (at most kBlock elements, fewer for a small region) of up to 8 bytes
    // (uint64_t storage keeps them aligned), carved from the thread's scratch: a region of a few
    // dozen elements (a recurrent cell's gates) must not allocate and zero kBlock-sized buffers
    // per call.
    const int64_t blk_len = std::min(kBlock, n);
    thread_local std::vector<uint64_t> scratch;
    const size_t need = (n_in + n_steps) * static_cast<size_t>(blk_len);
    if (scratch.size() < need) scratch.resize(need);
    // Input i's buffer, then step s's.
    auto in_buf = [&](size_t i) { return scratch.data() + i * static_cast<size_t>(blk_len); };
    auto step_buf = [&](size_t s) { return in_buf(n_in + s); };
    for (size_t i = 0; i < n_in; ++i) {
      if (mode[i] != InMode::Scalar) continue;
      const Tensor& t = ctx.in[i];
      visit_elem_size(dtype_size(t.dtype()), [&]<class U>() {
        auto* p = reinterpret_cast<U*>(in_buf(i));
        std::fill(p, p + blk_len, *static_cast<const U*>(t.raw()));
      });
    }

    for (int64_t blk = bb; blk < be; ++blk) {
      const int64_t b0 = blk * kBlock;
      const int64_t cnt = std::min(kBlock, n - b0);
      for (size_t i = 0; i < n_in; ++i) {
        if (mode[i] != InMode::Gather) continue;
        const Tensor& t = ctx.in[i];
        visit_elem_size(dtype_size(t.dtype()), [&]<class U>() {
          const auto* src = static_cast<const U*>(t.raw());
          auto* dst = reinterpret_cast<U*>(in_buf(i));
          for_each_row<1>(plans[i], b0, b0 + cnt,
                          [&](const std::array<int64_t, 1>& off, const std::array<int64_t, 1>& st, int64_t pos,
                              int64_t c) { copy_row(src + off[0], st[0], dst + (pos - b0), c); });
        });
      }
      auto ptr = [&](int32_t a) -> const void* {
        if (a < 0) return step_buf(static_cast<size_t>(-a - 1));
        const auto i = static_cast<size_t>(a);
        if (mode[i] == InMode::Direct)
          return static_cast<const uint8_t*>(ctx.in[i].raw()) + static_cast<size_t>(b0) * dtype_size(ctx.in[i].dtype());
        return in_buf(i);
      };
      for (size_t s = 0; s < n_steps; ++s) {
        const ops::RegionStep& st = op.steps[s];
        void* dst = s + 1 == n_steps
                        ? static_cast<void*>(static_cast<uint8_t*>(out.raw()) + static_cast<size_t>(b0) * dtype_size(sdt[s]))
                        : static_cast<void*>(step_buf(s));
        try {
          switch (st.kind) {
            case RegionStepKind::Binary:
              binary_span(static_cast<BinaryKind>(st.op), sdt[s], ptr(st.args[0]), 1, ptr(st.args[1]), 1, dst, cnt);
              break;
            case RegionStepKind::Compare:
              compare_span(static_cast<CompareKind>(st.op), arg_dtype(st.args[0]), ptr(st.args[0]), 1,
                           ptr(st.args[1]), 1, dst, cnt);
              break;
            case RegionStepKind::Activation:
              activation_span(static_cast<ActKind>(st.op), sdt[s], ptr(st.args[0]), dst, cnt);
              break;
            case RegionStepKind::Cast:
              cast_span(arg_dtype(st.args[0]), st.to, ptr(st.args[0]), dst, cnt);
              break;
            case RegionStepKind::Where:
              where_span(dtype_size(sdt[s]), static_cast<const uint8_t*>(ptr(st.args[0])), 1, ptr(st.args[1]), 1,
                         ptr(st.args[2]), 1, dst, cnt);
              break;
          }
        } catch (const Error& e) {
          throw Error(step_label(st, s) + ": " + e.what());
        }
      }
    }
  });
}

}  // namespace rlx::cpu
