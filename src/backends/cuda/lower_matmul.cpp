// MatMul and FusedMatMulBiasAct through cuBLASLt. Bias and ReLU / tanh-GELU run in cuBLASLt's
// epilogue; any other activation (exact-erf GELU, SiLU, ...) or a scalar bias runs in one fused
// elementwise kernel over the product, in place.
#include "backends/cuda/cuda_types.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/launch.h"
#include "backends/cuda/lower.h"
#include "rlx/error.h"

namespace rlx::cuda {
namespace {

struct Epilogue {
  GemmEpilogue lt = GemmEpilogue::None;
  std::vector<RegionStep> chain;  // applied after the GEMM when non-empty (x0 = C, x1 = bias)
  bool chain_uses_bias = false;
};

Epilogue choose_epilogue(int64_t bias_len, int64_t n, std::optional<ActKind> act) {
  Epilogue e;
  const bool vec_bias = bias_len > 0 && bias_len == n;
  const bool scalar_bias = bias_len > 0 && !vec_bias;
  if (!act || *act == ActKind::Relu || *act == ActKind::GeluApprox) {
    if (!scalar_bias) {
      if (!act) e.lt = vec_bias ? GemmEpilogue::Bias : GemmEpilogue::None;
      else if (*act == ActKind::Relu) e.lt = vec_bias ? GemmEpilogue::BiasRelu : GemmEpilogue::Relu;
      else e.lt = vec_bias ? GemmEpilogue::BiasGeluTanh : GemmEpilogue::GeluTanh;
      return e;
    }
  }
  // cuBLASLt computes the bias (when a full vector) and the kernel the activation; a scalar
  // bias and the activation both run in the kernel.
  if (vec_bias) e.lt = GemmEpilogue::Bias;
  int32_t x = 0;
  if (scalar_bias) {
    e.chain.push_back({RegionStepKind::Binary, static_cast<int32_t>(BinaryKind::Add), DType::F32, {0, 1}});
    e.chain_uses_bias = true;
    x = -1;
  }
  if (act) e.chain.push_back({RegionStepKind::Activation, static_cast<int32_t>(*act), DType::F32, {x}});
  return e;
}

// The full epilogue (bias of any length, then the activation) as an elementwise chain.
std::vector<RegionStep> chain_epilogue(int64_t bias_len, std::optional<ActKind> act) {
  std::vector<RegionStep> chain;
  int32_t x = 0;
  if (bias_len > 0) {
    chain.push_back({RegionStepKind::Binary, static_cast<int32_t>(BinaryKind::Add), DType::F32, {0, 1}});
    x = -1;
  }
  if (act) chain.push_back({RegionStepKind::Activation, static_cast<int32_t>(*act), DType::F32, {x}});
  return chain;
}

// Skinny products (at most 4 rows against one shared weight) run on the split-K GEMV kernels;
// returns false when the step does not qualify.
bool try_gemv(LowerContext& cx, const plan::Step& st, const plan::MatMulGeom& g, int64_t bias_len) {
  const plan::TensorRef& a = st.in.at(0);
  const plan::TensorRef& c = st.out.at(0);
  const DType t = c.dtype;
  if (g.trans_a || g.trans_b || g.k == 0 || g.n == 0) return false;
  int64_t rows = 0;
  if (g.batch == 1) rows = g.m;
  else if (g.b_stride == 0 && g.a_stride == g.m * g.k) rows = g.batch * g.m;
  else return false;
  const int vw = static_cast<int>(16 / dtype_size(t));
  uint8_t* pw = cx.ptr(st.in.at(1));
  if (rows < 1 || rows > 4 || g.n % vw != 0 || pointer_alignment(pw) < 16) return false;
  const int64_t col_tiles = (g.n + 32 * vw - 1) / (32 * vw);
  const int64_t sms = device().sm_count;
  int64_t splits = std::clamp<int64_t>((4 * sms + col_tiles - 1) / col_tiles, 1, (g.k + 63) / 64);
  int64_t kchunk = (g.k + splits - 1) / splits;
  kchunk = (kchunk + 7) / 8 * 8;
  splits = (g.k + kchunk - 1) / kchunk;
  const std::string what = step_label(st);
  auto* part = reinterpret_cast<float*>(cx.scratch(static_cast<size_t>(splits * rows * g.n) * 4, what + " split-K partials"));
  const std::string src = kernel_source(ksrc::kGemv, {{"T", storage_type(t)}}, "#define VW " + std::to_string(vw) + "\n");
  auto k1 = std::make_shared<KernelLaunch>(what + " gemv", get_kernel("gemv_partial", src),
                                           static_cast<unsigned>(col_tiles), 256, 0, static_cast<unsigned>(splits));
  k1->arg(static_cast<const uint8_t*>(cx.ptr(a))).arg(static_cast<const uint8_t*>(pw)).arg(part)
      .arg(static_cast<int32_t>(rows)).arg(g.k).arg(g.n).arg(kchunk);
  uint8_t* pc = cx.ptr(c);
  auto k2 = std::make_shared<KernelLaunch>(what + " gemv reduce", get_kernel("gemv_reduce", src),
                                           grid_for(rows * g.n, 256), 256);
  k2->arg(static_cast<const float*>(part)).arg(pc).arg(static_cast<int32_t>(splits)).arg(rows * g.n);
  cx.add([k1, k2](cudaStream_t s) {
    k1->launch(s);
    k2->launch(s);
  });
  const auto chain = chain_epilogue(bias_len, g.activation);
  if (!chain.empty()) {
    plan::ElementwiseGeom eg;
    eg.out_dims = {rows, g.n};
    eg.numel = rows * g.n;
    eg.in_strides.push_back({g.n, 1});
    std::vector<DType> dts{t};
    std::vector<const uint8_t*> ins{pc};
    if (bias_len > 0) {
      eg.in_strides.push_back({0, bias_len == g.n ? 1 : 0});
      dts.push_back(st.in.at(2).dtype);
      ins.push_back(cx.ptr(st.in.at(2)));
      eg.contiguous = false;
    }
    add_elementwise(cx, chain, dts, t, eg, pc, ins, what + " epilogue");
  }
  return true;
}

}  // namespace

void lower_matmul(LowerContext& cx, const plan::Step& st) {
  const auto& g = std::get<plan::MatMulGeom>(st.geom);
  const plan::TensorRef& a = st.in.at(0);
  const plan::TensorRef& b = st.in.at(1);
  const plan::TensorRef& c = st.out.at(0);
  if (a.dtype != b.dtype || a.dtype != c.dtype)
    throw Error(step_label(st) + ": CUDA matmul needs one dtype for both operands and the result");
  const int64_t bias_len = std::holds_alternative<ops::FusedMatMulBiasAct>(st.op) ? g.bias_len : 0;
  const Precision prec = cx.options().precision;
  // f32 graphs under the Fp16/Bf16 policy: both operands are converted to the half type on the
  // device every run (params may change) and multiplied with f32 accumulation into f32.
  const bool to_half = a.dtype == DType::F32 && (prec == Precision::Fp16 || prec == Precision::Bf16);
  if (c.numel() > 0 && !to_half && try_gemv(cx, st, g, bias_len)) return;
  const Epilogue epi = choose_epilogue(bias_len, g.n, g.activation);
  uint8_t* pa = cx.ptr(a);
  uint8_t* pb = cx.ptr(b);
  DType ab = a.dtype;
  if (to_half && c.numel() > 0) {
    ab = prec == Precision::Fp16 ? DType::F16 : DType::BF16;
    const std::vector<RegionStep> cast{{RegionStepKind::Cast, 0, ab, {0}}};
    auto convert = [&](const plan::TensorRef& r, const char* which) {
      uint8_t* dst = cx.scratch(static_cast<size_t>(r.numel()) * 2, step_label(st) + " " + which + " in half");
      plan::ElementwiseGeom eg;
      eg.out_dims = {r.numel()};
      eg.numel = r.numel();
      eg.in_strides = {{1}};
      add_elementwise(cx, cast, {DType::F32}, ab, eg, dst, {cx.ptr(r)}, step_label(st) + " " + which + " to half");
      return dst;
    };
    pa = convert(a, "lhs");
    pb = convert(b, "rhs");
  }
  uint8_t* pc = cx.ptr(c);
  const uint8_t* pbias = bias_len > 0 ? cx.ptr(st.in.at(2)) : nullptr;
  if (c.numel() == 0) return;
  const size_t es = dtype_size(ab);
  const size_t ces = dtype_size(c.dtype);

  GemmProblem p;
  p.dtype = c.dtype;
  p.ab_dtype = ab;
  p.m = g.m, p.n = g.n, p.k = g.k;
  p.trans_a = g.trans_a, p.trans_b = g.trans_b;
  p.lda = g.lda, p.ldb = g.ldb, p.ldc = g.ldc;
  p.precision = prec;
  p.epilogue = epi.lt;
  p.align_bias = pbias ? pointer_alignment(pbias) : 256;
  const bool strided = g.a_stride >= 0 && g.b_stride >= 0;
  if (g.k == 0) throw Error(step_label(st) + ": CUDA matmul with an empty contracting dim (k = 0) is not supported");
  if (strided) {
    p.batch = g.batch;
    p.a_stride = g.a_stride, p.b_stride = g.b_stride, p.c_stride = g.m * g.n;
    p.align_a = pointer_alignment(pa), p.align_b = pointer_alignment(pb), p.align_c = pointer_alignment(pc);
    GemmPlan& plan = cx.gemm(p, step_label(st));
    void* ws = cx.gemm_workspace();
    cx.add([&plan, pa, pb, pc, pbias, ws](cudaStream_t s) { plan.run(s, pa, pb, pc, pbias, ws); });
  } else {
    // Batch dims that do not collapse to one stride: one GEMM per batch item.
    std::vector<std::array<uint8_t*, 3>> items;
    int align_a = 256, align_b = 256, align_c = 256;
    for (int64_t i = 0; i < g.batch; ++i) {
      int64_t t = i, oa = 0, ob = 0;
      for (int64_t d = static_cast<int64_t>(g.batch_dims.size()) - 1; d >= 0; --d) {
        const int64_t idx = t % g.batch_dims[static_cast<size_t>(d)];
        t /= g.batch_dims[static_cast<size_t>(d)];
        oa += idx * g.a_batch_strides[static_cast<size_t>(d)];
        ob += idx * g.b_batch_strides[static_cast<size_t>(d)];
      }
      items.push_back({pa + oa * static_cast<int64_t>(es), pb + ob * static_cast<int64_t>(es),
                       pc + i * g.m * g.n * static_cast<int64_t>(ces)});
      align_a = std::min(align_a, pointer_alignment(items.back()[0]));
      align_b = std::min(align_b, pointer_alignment(items.back()[1]));
      align_c = std::min(align_c, pointer_alignment(items.back()[2]));
    }
    p.align_a = align_a, p.align_b = align_b, p.align_c = align_c;
    GemmPlan& plan = cx.gemm(p, step_label(st));
    void* ws = cx.gemm_workspace();
    cx.add([&plan, items, pbias, ws](cudaStream_t s) {
      for (const auto& it : items) plan.run(s, it[0], it[1], it[2], pbias, ws);
    });
  }
  if (!epi.chain.empty()) {
    plan::ElementwiseGeom eg;
    const int64_t rows = c.numel() / g.n;
    eg.out_dims = {rows, g.n};
    eg.numel = c.numel();
    eg.in_strides.push_back({g.n, 1});
    std::vector<DType> dts{c.dtype};
    std::vector<const uint8_t*> ins{pc};
    if (epi.chain_uses_bias) {
      eg.in_strides.push_back({0, 0});
      dts.push_back(st.in.at(2).dtype);
      ins.push_back(pbias);
      eg.contiguous = false;
    }
    add_elementwise(cx, epi.chain, dts, c.dtype, eg, pc, ins, step_label(st) + " epilogue");
  }
}

}  // namespace rlx::cuda
