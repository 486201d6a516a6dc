// MatMul and FusedMatMulBiasAct through cuBLASLt. Bias and ReLU / tanh-GELU run in cuBLASLt's
// epilogue; any other activation (exact-erf GELU, SiLU, ...) or a scalar bias runs in one fused
// elementwise kernel over the product, in place.
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

}  // namespace

void lower_matmul(LowerContext& cx, const plan::Step& st) {
  const auto& g = std::get<plan::MatMulGeom>(st.geom);
  const plan::TensorRef& a = st.in.at(0);
  const plan::TensorRef& b = st.in.at(1);
  const plan::TensorRef& c = st.out.at(0);
  if (a.dtype != b.dtype || a.dtype != c.dtype)
    throw Error(step_label(st) + ": CUDA matmul needs one dtype for both operands and the result");
  const int64_t bias_len = std::holds_alternative<ops::FusedMatMulBiasAct>(st.op) ? g.bias_len : 0;
  const Epilogue epi = choose_epilogue(bias_len, g.n, g.activation);
  uint8_t* pa = cx.ptr(a);
  uint8_t* pb = cx.ptr(b);
  uint8_t* pc = cx.ptr(c);
  const uint8_t* pbias = bias_len > 0 ? cx.ptr(st.in.at(2)) : nullptr;
  if (c.numel() == 0) return;
  const size_t es = dtype_size(a.dtype);

  GemmProblem p;
  p.dtype = a.dtype;
  p.m = g.m, p.n = g.n, p.k = g.k;
  p.trans_a = g.trans_a, p.trans_b = g.trans_b;
  p.lda = g.lda, p.ldb = g.ldb, p.ldc = g.ldc;
  p.precision = cx.options().precision;
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
                       pc + i * g.m * g.n * static_cast<int64_t>(es)});
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
