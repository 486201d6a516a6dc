// CPU kernel for DequantMatMul: x (..., M, K) @ dequant(w)^T with w raw ggml blocks (quant_matmul.h),
// or their packed 8-row form (quant_pack.h) when the weight is a Param / Constant of Q4_0, Q4_1, Q8_0, K formats.
// f16 / bf16 x is widened to f32 and the result rounded on store.
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/quant_matmul.h"
#include "backends/cpu/quant_pack.h"

namespace rlx::cpu {

void kernel(const ops::DequantMatMul& op, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  const Tensor& w = ctx.in[1];
  Tensor& y = ctx.out[0];
  const QuantBlock blk = quant_block(op.format);
  const std::string where = "node " + std::to_string(ctx.node.id) + " (dequant_matmul " + enum_name(op.format) + ")";
  if (op.k <= 0 || op.k % blk.elements != 0 || x.rank() < 1 || x.dim(x.rank() - 1) != op.k)
    throw Error(where + ": x " + dims_str(x.shape()) + " does not end in K = " + std::to_string(op.k));
  const int64_t row_bytes = op.k / blk.elements * blk.bytes;
  if (w.dtype() != DType::U8 || w.rank() != 2 || w.dim(1) != row_bytes)
    throw Error(where + ": the weight must be u8 (N, " + std::to_string(row_bytes) + "), got " +
                dtype_name(w.dtype()) + " " + dims_str(w.shape()));
  const int64_t k = op.k, n = w.dim(0), m = x.numel() / k;
  const auto* wb = static_cast<const uint8_t*>(w.raw());
  // A Param / Constant weight of a packable format runs from its packed form, built at the first
  // run of each params generation (the executor keeps it).
  const uint8_t* packed = nullptr;
  if (ctx.weight_cache && quant_pack_format(op.format)) {
    Derived<uint8_t>& pk = ctx.weight_cache->quant;
    if (!pk.fresh(wb, ctx.params_generation) ||
        static_cast<int64_t>(pk.data.size()) != quant_packed_bytes(op.format, n, k)) {
      pk.valid = false;  // until the packing below completes
      quant_pack(op.format, wb, n, k, pk.data);
      pk.valid = true;
    }
    packed = pk.data.data();
  }
  auto product = [&](const float* xs, float* ys) {
    if (packed) dequant_matmul_packed(op.format, xs, m, k, packed, n, ys);
    else dequant_matmul(DequantPath::Auto, op.format, xs, m, k, wb, n, ys);
  };
  if (x.dtype() == DType::F32) {
    product(x.data<float>(), y.data<float>());
    return;
  }
  std::vector<float> xf(static_cast<size_t>(m * k)), yf(static_cast<size_t>(m * n));
  if (x.dtype() == DType::F16) {
    const f16* s = x.data<f16>();
    for (size_t i = 0; i < xf.size(); ++i) xf[i] = static_cast<float>(s[i]);
  } else if (x.dtype() == DType::BF16) {
    const bf16* s = x.data<bf16>();
    for (size_t i = 0; i < xf.size(); ++i) xf[i] = static_cast<float>(s[i]);
  } else {
    throw Error(where + ": x must be f32, f16 or bf16, got " + dtype_name(x.dtype()));
  }
  product(xf.data(), yf.data());
  if (y.dtype() == DType::F16) {
    f16* d = y.data<f16>();
    for (size_t i = 0; i < yf.size(); ++i) d[i] = f16(yf[i]);
  } else {
    bf16* d = y.data<bf16>();
    for (size_t i = 0; i < yf.size(); ++i) d[i] = bf16(yf[i]);
  }
}

}  // namespace rlx::cpu
