#include "backends/cuda/gemm.h"

#include <mutex>

#include "backends/cuda/cuda_libs.h"
#include "backends/cuda/device.h"
#include "backends/cuda/status.h"
#include "rlx/error.h"

namespace rlx::cuda {
namespace {

cudaDataType_t data_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F64: return CUDA_R_64F;
    default: break;
  }
  throw Error(std::string("CUDA matmul: dtype ") + dtype_name(t) + " is not supported (use f32, f16, bf16 or f64)");
}

cublasComputeType_t compute_type(DType t, Precision p) {
  if (t == DType::F64) return CUBLAS_COMPUTE_64F;  // whatever the policy: it is for f32 graphs
  if (t != DType::F32) return CUBLAS_COMPUTE_32F;  // half storage: f32 accumulation
  switch (p) {
    case Precision::Fp32: return CUBLAS_COMPUTE_32F;
    case Precision::Tf32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case Precision::Fp16: return CUBLAS_COMPUTE_32F_FAST_16F;
    case Precision::Bf16: return CUBLAS_COMPUTE_32F_FAST_16BF;
  }
  return CUBLAS_COMPUTE_32F;
}

cublasLtEpilogue_t lt_epilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::None: return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::Relu: return CUBLASLT_EPILOGUE_RELU;
    case GemmEpilogue::BiasRelu: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case GemmEpilogue::GeluTanh: return CUBLASLT_EPILOGUE_GELU;
    case GemmEpilogue::BiasGeluTanh: return CUBLASLT_EPILOGUE_GELU_BIAS;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool has_bias(GemmEpilogue e) {
  return e == GemmEpilogue::Bias || e == GemmEpilogue::BiasRelu || e == GemmEpilogue::BiasGeluTanh;
}

template <class T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const T& v) {
  RLX_CUBLAS_CHECK(cublaslt().cublasLtMatmulDescSetAttribute(d, a, &v, sizeof v));
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                   int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  RLX_CUBLAS_CHECK(
      cublaslt().cublasLtMatrixLayoutCreate(&l, t, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    RLX_CUBLAS_CHECK(
        cublaslt().cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
    RLX_CUBLAS_CHECK(cublaslt().cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                                 &stride, sizeof stride));
  }
  return l;
}

}  // namespace

cublasLtHandle_t cublaslt_handle() {
  static std::once_flag once;
  static cublasLtHandle_t h = nullptr;
  std::call_once(once, [] {
    device();
    RLX_CUBLAS_CHECK(cublaslt().cublasLtCreate(&h));
  });
  return h;
}

int pointer_alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int a = 1;
  while (a < 256 && (v % (2 * a)) == 0) a *= 2;
  return a;
}

GemmPlan::GemmPlan(const GemmProblem& p, size_t workspace_bytes, const std::string& what)
    : p_(p), workspace_bytes_(workspace_bytes), what_(what) {
  if (p.add_c && p.epilogue != GemmEpilogue::None && p.epilogue != GemmEpilogue::Bias)
    throw Error("internal: cuBLASLt would apply the activation after the residual for " + what);
  const cudaDataType_t t = data_type(p.dtype), tab = data_type(p.ab_dtype);
  if (p.dtype == DType::F64 && (p.ab_dtype != DType::F64 || p.epilogue != GemmEpilogue::None))
    throw Error("internal: an f64 product takes f64 operands and no cuBLASLt epilogue (" + what + ")");
  RLX_CUBLAS_CHECK(cublaslt().cublasLtMatmulDescCreate(&op_, compute_type(p.ab_dtype, p.precision),
                                            p.dtype == DType::F64 ? CUDA_R_64F : CUDA_R_32F));
  // Column-major view: C^T (n x m) = op(B)^T (n x k) @ op(A)^T (k x m).
  const cublasOperation_t ta = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // "A" of cuBLASLt is our B
  const cublasOperation_t tb = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_attr(op_, CUBLASLT_MATMUL_DESC_TRANSA, ta);
  set_attr(op_, CUBLASLT_MATMUL_DESC_TRANSB, tb);
  set_attr(op_, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(p.epilogue));
  if (has_bias(p.epilogue)) set_attr(op_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, t);
  la_ = make_layout(tab, p.trans_b ? p.k : p.n, p.trans_b ? p.n : p.k, p.ldb, p.batch, p.b_stride);
  lb_ = make_layout(tab, p.trans_a ? p.m : p.k, p.trans_a ? p.k : p.m, p.lda, p.batch, p.a_stride);
  lc_ = make_layout(t, p.n, p.m, p.ldc, p.batch, p.c_stride);

  cublasLtMatmulPreference_t pref = nullptr;
  RLX_CUBLAS_CHECK(cublaslt().cublasLtMatmulPreferenceCreate(&pref));
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublaslt().cublasLtMatmulPreferenceDestroy(p); }
  } guard{pref};
  auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t a, uint64_t v) {
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
      RLX_CUBLAS_CHECK(cublaslt().cublasLtMatmulPreferenceSetAttribute(pref, a, &v, sizeof v));
    } else {
      const uint32_t v32 = static_cast<uint32_t>(v);
      RLX_CUBLAS_CHECK(cublaslt().cublasLtMatmulPreferenceSetAttribute(pref, a, &v32, sizeof v32));
    }
  };
  set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint64_t>(p.align_b));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint64_t>(p.align_a));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint64_t>(p.align_c));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint64_t>(p.align_c));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  RLX_CUBLAS_CHECK(cublaslt().cublasLtMatmulAlgoGetHeuristic(cublaslt_handle(), op_, la_, lb_, lc_, lc_, pref, 1,
                                                             &result, &found));
  if (found == 0)
    throw Error("cuBLASLt has no algorithm for " + what + " (" + dtype_name(p.dtype) + " m=" + std::to_string(p.m) +
                " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) + " batch=" + std::to_string(p.batch) + ")");
  algo_ = result.algo;
}

GemmPlan::~GemmPlan() {
  if (lc_) cublaslt().cublasLtMatrixLayoutDestroy(lc_);
  if (lb_) cublaslt().cublasLtMatrixLayoutDestroy(lb_);
  if (la_) cublaslt().cublasLtMatrixLayoutDestroy(la_);
  if (op_) cublaslt().cublasLtMatmulDescDestroy(op_);
}

void GemmPlan::run(cudaStream_t s, const void* a, const void* b, void* c, const void* bias, void* workspace,
                   const void* cin) const {
  if (has_bias(p_.epilogue))
    RLX_CUBLAS_CHECK(
        cublaslt().cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  // The scale type is the compute type's: double for f64 products, float otherwise.
  const float alpha = 1.0f, beta = p_.add_c ? 1.0f : 0.0f;
  const double alpha64 = 1.0, beta64 = p_.add_c ? 1.0 : 0.0;
  const bool f64 = p_.dtype == DType::F64;
  const void* c_in = p_.add_c ? cin : c;
  const cublasStatus_t st =
      cublaslt().cublasLtMatmul(cublaslt_handle(), op_, f64 ? static_cast<const void*>(&alpha64) : &alpha, b, la_,
                                a, lb_, f64 ? static_cast<const void*>(&beta64) : &beta, c_in, lc_, c, lc_, &algo_,
                                workspace, workspace_bytes_, s);
  if (st != CUBLAS_STATUS_SUCCESS)
    throw Error("cuBLASLt matmul failed for " + what_ + ": " + cublaslt().cublasLtGetStatusName(st) + " (" +
                cublaslt().cublasLtGetStatusString(st) + ")");
}

}  // namespace rlx::cuda
