#pragma once
// Row-major (batched) GEMM through cuBLASLt: C[b] = op(A[b]) @ op(B[b]) (+ bias over the last
// axis, ReLU / tanh-GELU in cuBLASLt's epilogue). The operation and layout descriptors and the
// algorithm are built once per Step (the pointers' alignment is known then) and reused by
// every run. Row-major C = A @ B is issued as column-major C^T = B^T @ A^T.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "rlx/dtype.h"
#include "rlx/session.h"

namespace rlx::cuda {

enum class GemmEpilogue { None, Bias, Relu, BiasRelu, GeluTanh, BiasGeluTanh };

struct GemmProblem {
  DType dtype = DType::F32;  // of C (and bias)
  DType ab_dtype = DType::F32;  // of A and B (bf16/f16 under a mixed-precision policy for f32 C)
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1, a_stride = 0, b_stride = 0, c_stride = 0;  // strided batch (0 = shared)
  Precision precision = Precision::Fp32;
  GemmEpilogue epilogue = GemmEpilogue::None;
  // D = A @ B + C with C a separate input of D's layout (a residual; beta = 1), added before
  // cuBLASLt's epilogue: only without an activation in the epilogue.
  bool add_c = false;
  // Alignment in bytes of the pointers the plan will be run with (a power of two, <= 256).
  int align_a = 256, align_b = 256, align_c = 256, align_bias = 256;
};

// The shared cuBLASLt handle (created on first use).
cublasLtHandle_t cublaslt_handle();

class GemmPlan {
 public:
  GemmPlan(const GemmProblem& p, size_t workspace_bytes, const std::string& what);
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;
  ~GemmPlan();
  // `cin`: the C input when the problem has add_c (may equal c), else ignored.
  void run(cudaStream_t s, const void* a, const void* b, void* c, const void* bias, void* workspace,
           const void* cin = nullptr) const;
  const GemmProblem& problem() const { return p_; }

 private:
  GemmProblem p_;
  size_t workspace_bytes_;
  std::string what_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, lc_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
};

// Alignment (power of two, capped at 256) of a device address.
int pointer_alignment(const void* p);

}  // namespace rlx::cuda
