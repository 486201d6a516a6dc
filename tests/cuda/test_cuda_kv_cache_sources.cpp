// The KV-cache kernel sources compile with NVRTC (no GPU needed): cache_write for every storage
// type the lowering instantiates, and the attention kernels with the Positions mask (i32 / i64
// positions as M): the generic one and the split decode one (POS_MASK), the tensor-core decode
// one (MASK 5).
#ifdef RLX_HAVE_CUDA
#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/cuda_types.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/attention_decode_tc.h"
#include "backends/cuda/kernels/cache.h"
#include "backends/cuda/kernels/attention_mma.h"
#include "backends/cuda/kernels/mma.h"
#include "backends/cuda/lower.h"

namespace {

using namespace rlx;
using namespace rlx::cuda;

void compiles(const std::string& entry, const std::string& src) {
  SCOPED_TRACE(entry);
  EXPECT_GT(nvrtc_compile(entry, src, "sm_90", /*fast_compile=*/true).size(), 100u);
}

TEST(CudaKvCacheSources, CacheWriteCompilesForEveryStorageType) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I8, DType::U8, DType::I32, DType::I64})
    for (DType it : {DType::I32, DType::I64})
      for (DType tc : {DType::F32, DType::BF16})  // the RoPE tables' storage (rotating float rows only)
        for (int rope = 0; rope < (t == DType::F32 || t == DType::F16 || t == DType::BF16 ? 2 : 1); ++rope)
          compiles(std::string("cache_write ") + dtype_name(t) + " " + dtype_name(it) + " " + dtype_name(tc) +
                       (rope ? " rope" : ""),
                   kernel_source(ksrc::kCacheWrite,
                                 {{"T", storage_type(t)}, {"I", storage_type(it)}, {"TC", storage_type(tc)}},
                                 "#define ROPE " + std::to_string(rope) + "\n"));
}

TEST(CudaKvCacheSources, AttentionWithPositionsMaskCompiles) {
  EXPECT_EQ(attention_mask_code(MaskKind::Positions), 5);
  const std::string body = std::string(ksrc::kAttentionCommon) + ksrc::kAttention + ksrc::kAttentionCombine;
  struct Variant {
    int hd;
    DType t, positions;
  };
  for (const Variant& v : {Variant{64, DType::F32, DType::I64}, Variant{128, DType::F16, DType::I32},
                           Variant{16, DType::BF16, DType::I64}}) {
    const int rpw = v.hd <= 64 ? 16 : 8;  // the query rows per warp the lowering picks
    compiles("attention positions",
             kernel_source(body.c_str(), {{"T", storage_type(v.t)}, {"M", storage_type(v.positions)}},
                           "#define HD " + std::to_string(v.hd) + "\n#define RPW " + std::to_string(rpw) +
                               "\n#define POS_MASK 1\n"));
  }
}

TEST(CudaKvCacheSources, DecodeAttentionWithPositionsMaskCompiles) {
  auto def = [](const char* n, int64_t v) { return "#define " + std::string(n) + " " + std::to_string(v) + "\n"; };
  const std::string split = std::string(ksrc::kAttentionCommon) + ksrc::kAttentionDecodeLoads + ksrc::kAttentionDecode;
  for (DType it : {DType::I32, DType::I64})
    compiles("attn_decode positions",
             kernel_source(split.c_str(), {{"T", "float"}, {"M", storage_type(it)}, {"TC", "float"}},
                           def("HD", 64) + def("R", 3) + def("K_STATIC", 0) + def("V_STATIC", 0) + def("ROPE_Q", 0) +
                               def("ROPE_K", 0) + def("NK", 0) + def("NV", 0) + def("SMKV", 0) + def("CL", 0) +
                               def("KC", ksrc::kDecodeChunkKeys) + "#define POS_MASK 1\n"));
  const std::string tc = std::string(ksrc::kAttentionCommon) + ksrc::kAttentionDecodeLoads + ksrc::kAttentionDecodeTc;
  compiles("attn_decode_tc positions",
           kernel_source(tc.c_str(), {{"T", "bf16_t"}, {"M", "i64_t"}, {"TC", "float"}},
                         def("BF16", 1) + def("HD", 64) + def("R", 3) + def("NW", 8) + def("BN", 64) + def("MASK", 5) +
                             def("SOFTCAP", 0) + def("ROPE_STATIC", 0) + def("K_STATIC", 0) + def("V_STATIC", 0) +
                             def("ROPE_Q", 0) + def("ROPE_K", 0) + def("NK", 0) + ksrc::kTensorCoreHelpers +
                             ksrc::kMma16816));
}

}  // namespace
#endif  // RLX_HAVE_CUDA
