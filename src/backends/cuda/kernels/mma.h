#pragma once
// The warp-level tensor-core product the attention kernels and the tensor-core GEMV share,
// placed before their bodies by the lowering (BF16 must be defined: 1 for bf16 operands, 0 for
// f16). Fragments as PTX's mma.m16n8k16 (row-major A, column-major B): lane l = 4 g + t holds
// A rows g and g + 8 at columns 2t, 2t + 1 (a[0], a[1]) and 2t + 8, 2t + 9 (a[2], a[3]), B
// column g at rows 2t, 2t + 1 (b0) and 2t + 8, 2t + 9 (b1), C rows g and g + 8 at columns 2t,
// 2t + 1.
namespace rlx::cuda::ksrc {

inline constexpr const char* kMma16816 = R"CUDA(
// c += a (16x16, row) * b (16x8, col), f32 accumulators.
__device__ __forceinline__ void mma16816(float* c, const unsigned* a, unsigned b0, unsigned b1) {
#if BF16
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
)CUDA";

}  // namespace rlx::cuda::ksrc
