// Softmax / LogSoftmax, LayerNorm / RmsNorm (+ fused residual), FusedSwiGLU and Reduce.
#include "backends/cuda/cuda_types.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/kernels/rows.h"
#include "backends/cuda/launch.h"
#include "backends/cuda/lower.h"
#include "rlx/error.h"

namespace rlx::cuda {
namespace {

// Rows up to this many elements are held in shared memory (48 KB without an opt-in).
constexpr int64_t kCachedRow = 11264;

CUfunction row_kernel(const char* entry, DType t) { return get_kernel(entry, rows_source(t)); }

// Vector loads/stores: every row starts 16-byte aligned (row bytes and base pointers).
int vector_rows(int64_t len, DType t, std::initializer_list<const uint8_t*> ptrs) {
  if ((len * static_cast<int64_t>(dtype_size(t))) % 16 != 0) return 0;
  for (const uint8_t* p : ptrs)
    if (p && reinterpret_cast<uintptr_t>(p) % 16 != 0) return 0;
  return 1;
}

// Threads per block for a row of `len` elements (one block per row).
unsigned row_block(int64_t len) {
  if (len >= 4096) return 1024;
  if (len >= 1024) return 512;
  if (len >= 256) return 256;
  return 128;
}

// The same for the softmax and norm kernels, whose loads and stores move 16-byte vectors of
// dtype t: sized by the row's vectors, so that no thread idles in those phases and more rows
// (blocks) are in flight per multiprocessor. Measured on the H100 (docs/benchmarks.md, session
// 19): LayerNorm 16384 x 4096 bf16 at 1024 threads per row left half of them idle.
unsigned vector_row_block(int64_t len, DType t) {
  return row_block(len / static_cast<int64_t>(16 / dtype_size(t)));
}

void push(LowerContext& cx, std::shared_ptr<KernelLaunch> l) {
  cx.add([l](cudaStream_t s) { l->launch(s); });
}

// One block per row, capped at a few waves (blocks loop over the remaining rows).
unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, int64_t(device().sm_count) * 16));
}

}  // namespace

std::string acc_conversion_defines(bool through_f32) {
  return through_f32 ? "#define TO_A(x) to_f(x)\n#define FROM_A(v) from_f<T>(v)\n"
                     : "#define TO_A(x) ((A)(x))\n#define FROM_A(v) ((T)(v))\n";
}

// f64 rows compute in double (A), the others in f32.
std::string rows_source(DType t) {
  const bool f64 = t == DType::F64;
  const std::string defs = "#define VV " + std::to_string(16 / dtype_size(t)) + "\n" + acc_conversion_defines(!f64) +
                           (f64 ? "#define A_EXP exp\n#define A_LOG log\n" : "#define A_EXP expf\n#define A_LOG logf\n");
  return kernel_source(ksrc::kRows, {{"T", storage_type(t)}, {"A", f64 ? "double" : "float"}}, defs);
}

std::string reduce_source(DType t) {
  const std::string ty = storage_type(t);
  if (is_float(t)) {
    const bool f64 = t == DType::F64;
    return kernel_source(ksrc::kReduce, {{"T", ty}, {"A", f64 ? "double" : "float"}},
                         acc_conversion_defines(!f64) + ksrc::kReduceFloat);
  }
  // T (i8-i64, u8, u32, bool) widens to the 64-bit A of its signedness exactly.
  const bool is_signed = is_signed_int(t);
  const std::string defs =
      acc_conversion_defines(false) +
      (is_signed ? "#define A_LOWEST (-0x7fffffffffffffffLL - 1)\n#define A_HIGHEST 0x7fffffffffffffffLL\n"
                 : "#define A_LOWEST 0ULL\n#define A_HIGHEST 0xffffffffffffffffULL\n");
  return kernel_source(ksrc::kReduce, {{"T", ty}, {"A", is_signed ? "long long" : "unsigned long long"}},
                       defs + ksrc::kReduceInt);
}

void lower_rows(LowerContext& cx, const plan::Step& st) {
  const DType t = st.out.at(0).dtype;
  uint8_t* y = cx.ptr(st.out.at(0));
  const uint8_t* x = cx.ptr(st.in.at(0));
  const std::string what = step_label(st);
  if (st.out.at(0).numel() == 0) return;

  if (std::holds_alternative<ops::Softmax>(st.op) || std::holds_alternative<ops::LogSoftmax>(st.op)) {
    const auto& g = std::get<plan::AxisGeom>(st.geom);
    const int log_out = std::holds_alternative<ops::LogSoftmax>(st.op) ? 1 : 0;
    if (g.inner == 1) {
      const bool cached = g.axis <= kCachedRow && t != DType::F64;  // the cached row is f32
      auto l = std::make_shared<KernelLaunch>(what, row_kernel(cached ? "softmax_rows_cached" : "softmax_rows", t),
                                              row_grid(g.outer), vector_row_block(g.axis, t),
                                              cached ? static_cast<unsigned>(g.axis * 4) : 0u);
      l->pdl();
      l->arg(x).arg(y).arg(g.outer).arg(g.axis).arg(log_out);
      if (cached) l->arg(vector_rows(g.axis, t, {x, y}));
      push(cx, l);
    } else {
      auto l = std::make_shared<KernelLaunch>(what, row_kernel("softmax_cols", t), grid_for(g.outer * g.inner, 256), 256);
      l->pdl();
      l->arg(x).arg(y).arg(g.outer).arg(g.axis).arg(g.inner).arg(log_out);
      push(cx, l);
    }
    return;
  }
  const bool ln = std::holds_alternative<ops::LayerNorm>(st.op), rms = std::holds_alternative<ops::RmsNorm>(st.op);
  const bool rln = std::holds_alternative<ops::FusedResidualLN>(st.op);
  const bool rrms = std::holds_alternative<ops::FusedResidualRmsNorm>(st.op);
  if (ln || rms || rln || rrms) {
    const auto& g = std::get<plan::AxisGeom>(st.geom);
    const bool fused = rln || rrms;
    const size_t gi = fused ? 2 : 1;  // gamma's input index
    const uint8_t* res = fused ? cx.ptr(st.in.at(1)) : nullptr;
    const uint8_t* gamma = cx.ptr(st.in.at(gi));
    const uint8_t* beta = st.in.size() > gi + 1 ? cx.ptr(st.in.at(gi + 1)) : nullptr;
    for (size_t i = 1; i < st.in.size(); ++i)
      if (st.in[i].dtype != t) throw Error(what + ": CUDA norms need gamma/beta/residual in the input's dtype");
    double eps = 0;
    if (ln) eps = std::get<ops::LayerNorm>(st.op).eps;
    if (rms) eps = std::get<ops::RmsNorm>(st.op).eps;
    if (rln) eps = std::get<ops::FusedResidualLN>(st.op).eps;
    if (rrms) eps = std::get<ops::FusedResidualRmsNorm>(st.op).eps;
    const int is_rms = (rms || rrms) ? 1 : 0;
    const bool cached = g.axis <= kCachedRow;
    auto l = std::make_shared<KernelLaunch>(what, row_kernel(cached ? "norm_rows_cached" : "norm_rows", t),
                                            row_grid(g.outer), vector_row_block(g.axis, t),
                                            cached ? static_cast<unsigned>(g.axis * 4) : 0u);
    l->pdl();
    l->arg(x).arg(res).arg(gamma).arg(beta).arg(y).arg(g.outer).arg(g.axis).arg(static_cast<float>(eps)).arg(is_rms);
    if (cached) l->arg(vector_rows(g.axis, t, {x, res, gamma, beta, y}));
    push(cx, l);
    return;
  }
  if (const auto* sw = std::get_if<ops::FusedSwiGLU>(&st.op)) {
    const auto& g = std::get<plan::AxisGeom>(st.geom);
    const int64_t rows = g.outer, n = g.out_axis;
    auto l = std::make_shared<KernelLaunch>(what, row_kernel("swiglu", t), grid_for(rows * n, 256), 256);
    l->pdl();
    l->arg(x).arg(y).arg(rows).arg(n).arg(sw->gate_first ? 1 : 0);
    push(cx, l);
    return;
  }
  if (std::holds_alternative<ops::Reduce>(st.op)) {
    const auto& g = std::get<plan::ReduceGeom>(st.geom);
    const int kind = static_cast<int>(g.kind);
    // As the CPU: Max / Min of nothing has no value, nor has an integer mean of nothing.
    const bool minmax = g.kind == ReduceKind::Max || g.kind == ReduceKind::Min;
    if (g.count == 0 && (minmax || (g.kind == ReduceKind::Mean && !is_float(t))))
      throw Error(what + ": " + enum_name(g.kind) + " reduces zero elements (an empty reduced axis); only sum, prod "
                  "and float mean allow that");
    auto reduce_kernel = [&](const char* entry) { return get_kernel(entry, reduce_source(t)); };
    if (g.simple && g.inner == 1) {
      auto l = std::make_shared<KernelLaunch>(what, reduce_kernel("reduce_rows"), row_grid(g.outer), row_block(g.reduce));
      l->pdl();
      l->arg(x).arg(y).arg(g.outer).arg(g.reduce).arg(kind);
      push(cx, l);
    } else if (g.simple) {
      auto l = std::make_shared<KernelLaunch>(what, reduce_kernel("reduce_cols"), grid_for(g.outer * g.inner, 256), 256);
      l->pdl();
      l->arg(x).arg(y).arg(g.outer).arg(g.reduce).arg(g.inner).arg(kind);
      push(cx, l);
    } else {
      struct ReduceDims {
        int64_t dims[8];
        int32_t reduced[8];
        int32_t rank;
      } rd{};
      if (g.dims.size() > 8) throw Error(what + ": CUDA reduce supports at most 8 alternating dim groups");
      rd.rank = static_cast<int32_t>(g.dims.size());
      for (size_t i = 0; i < g.dims.size(); ++i) {
        rd.dims[i] = g.dims[i];
        rd.reduced[i] = g.reduced[i];
      }
      const int64_t outputs = st.out.at(0).numel();
      auto l = std::make_shared<KernelLaunch>(what, reduce_kernel("reduce_general"), grid_for(outputs, 256), 256);
      l->pdl();
      l->arg(x).arg(y).arg(rd).arg(outputs).arg(g.count).arg(kind);
      push(cx, l);
    }
    return;
  }
  throw Error(what + ": not a row op of the CUDA backend");
}

}  // namespace rlx::cuda
