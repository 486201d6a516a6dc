// Every NVRTC kernel source of the CUDA backend compiles for sm_90 (NVRTC needs no GPU, so this
// runs wherever the backend is built), and a compile error names the kernel and carries the log.
#ifdef RLX_HAVE_CUDA
#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/cuda_types.h"
#include "backends/cuda/elementwise_codegen.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/attention_decode_tc.h"
#include "backends/cuda/kernels/attention_mma.h"
#include "backends/cuda/kernels/attention_wgmma.h"
#include "backends/cuda/kernels/mma.h"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/random.h"
#include "backends/cuda/kernels/rows.h"
#include "backends/cuda/kernels/scan.h"
#include "backends/cuda/kernels/scatter.h"
#include "backends/cuda/kernels/select.h"
#include "backends/cuda/kernels/shape.h"
#include "backends/cuda/lower.h"
#include "backends/cuda/lower_attention_mma.h"
#include "codegen/language.h"
#include "support/test_util.h"

namespace {

using namespace rlx;
using namespace rlx::cuda;

void compiles(const std::string& entry, const std::string& src) {
  SCOPED_TRACE(entry);
  const auto cubin = nvrtc_compile(entry, src, "sm_90", /*fast_compile=*/true);
  EXPECT_GT(cubin.size(), 100u);
}

TEST(CudaKernelSources, RowKernelsCompileForEveryFloatType) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64}) compiles("rows", rows_source(t));
}

TEST(CudaKernelSources, ReduceKernelsCompileForEveryDtype) {
  for (DType t : kAllDTypes)
    if (codegen::cuda_language().storage_dtype(t)) compiles(std::string("reduce ") + dtype_name(t), reduce_source(t));
}

GemvConfig gemv_config(DType t, int64_t rows) {
  GemvConfig c;
  c.t = c.bias_t = t;
  c.rows = rows;
  return c;
}

TEST(CudaKernelSources, GemvCompilesForEveryFloatType) {
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t rows : {1, 4}) {
      GemvConfig c = gemv_config(t, rows);
      compiles("gemv plain", gemv_source(c));
      c.evict_first = false;  // W through the read-only path
      compiles("gemv plain, no evict-first", gemv_source(c));
      compiles("gemv_packed plain, no evict-first", gemv_packed_source(c, 24, 1));
      c.evict_first = true;
      c.bias = 2, c.act = ActKind::Gelu, c.residual = true;
      compiles("gemv epilogue", gemv_source(c));
      c.bias = 1, c.act = ActKind::Silu, c.residual = false, c.prologue = 1, c.has_beta = true;
      compiles("gemv rms_norm prologue", gemv_source(c));
      c.stage_rows = true;
      compiles("gemv rms_norm prologue, rows staged", gemv_source(c));
      c.stage_rows = false;
      c.prologue = 2, c.gate_first = true;
      compiles("gemv swiglu prologue", gemv_source(c));
      for (int64_t lanes : {1, 4, 32}) {  // every row layout, with and without the L2 prefetch
        c.lanes_per_row = lanes, c.l2_prefetch = lanes == 4, c.w_static = lanes != 32;
        compiles("gemv lanes per row " + std::to_string(lanes), gemv_source(c));
      }
    }
  GemvConfig bad;
  bad.lanes_per_row = 12;
  EXPECT_THROW(gemv_source(bad), Error);
}

// The packed GEMV on the CUDA cores (every float type) and on the tensor cores (f16 / bf16), A
// rows 1 and 4, A by element or in 16-byte words, every prologue and epilogue; the (warps, warps
// per row) of each step: the CUDA-core kernel's rows shared or not, the tensor-core kernel's
// tile rows taken by one warp, a group of warps meeting at a named barrier, or the whole block.
TEST(CudaKernelSources, PackedGemvCompilesForEveryFloatType) {
  struct Split {
    int64_t warps, wpr;
  };
  const Split splits[2][5] = {{{32, 1}, {32, 4}, {16, 2}, {32, 1}, {8, 8}}, {{24, 1}, {32, 8}, {24, 24}, {28, 7}, {32, 32}}};
  for (bool tc : {false, true})
    for (DType t : {DType::F32, DType::F16, DType::BF16})
      for (int64_t rows : {1, 4})
        for (bool vec_a : {false, true}) {
          if (tc && t == DType::F32) continue;
          SCOPED_TRACE(std::string(dtype_name(t)) + (tc ? " tensor cores" : " CUDA cores") +
                       (vec_a ? ", A in 16-byte words" : ", A by element"));
          const Split* sp = splits[tc ? 1 : 0];
          GemvConfig c = gemv_config(t, rows);
          c.vec_a = vec_a, c.tensor_cores = tc;
          compiles("gemv_packed plain", gemv_packed_source(c, sp[0].warps, sp[0].wpr));
          c.bias = 2, c.act = ActKind::Gelu, c.residual = true;
          compiles("gemv_packed epilogue, rows shared", gemv_packed_source(c, sp[1].warps, sp[1].wpr));
          c.bias = 1, c.act = ActKind::Silu, c.residual = false, c.prologue = 1, c.has_beta = true;
          compiles("gemv_packed rms_norm prologue", gemv_packed_source(c, sp[2].warps, sp[2].wpr));
          c.gain_static = true;
          compiles("gemv_packed rms_norm prologue, gain staged before waiting", gemv_packed_source(c, sp[3].warps, sp[3].wpr));
          c.prologue = 2, c.gate_first = true;
          compiles("gemv_packed swiglu prologue", gemv_packed_source(c, sp[4].warps, sp[4].wpr));
        }
  for (size_t e : {2, 4}) compiles("gemv_pack", gemv_pack_source(e, false));
  compiles("gemv_pack tiles", gemv_pack_source(2, true));
  EXPECT_THROW(gemv_pack_source(4, true), Error);
  GemvConfig c;
  compiles("gemv_packed 28 warps", gemv_packed_source(c, 28, 4));
  EXPECT_THROW(gemv_packed_source(c, 12, 8), Error);
  EXPECT_THROW(gemv_packed_source(c, 8, 16), Error);
  EXPECT_THROW(gemv_packed_source(c, 33, 1), Error);
  c.tensor_cores = true;
  EXPECT_THROW(gemv_packed_source(c, 32, 32), Error);  // f32 has no tensor-core kernel
  c.t = c.bias_t = DType::BF16;
  EXPECT_THROW(gemv_packed_source(c, 32, 2), Error);   // 16 groups: more than the named barriers
  EXPECT_THROW(gemv_packed_source(c, 32, 5), Error);   // not a divisor
  EXPECT_NO_THROW(gemv_packed_source(c, 30, 2));       // 15 groups
}

TEST(CudaKernelSources, DataMovementKernelsCompile) {
  for (size_t e : {1, 2, 4, 8})
    for (const char* idx : {"i32_t", "i64_t"})
      compiles("copy", kernel_source(ksrc::kCopy, {{"E", word_type(e)}, {"I", idx}}));
  compiles("rope", kernel_source(ksrc::kRope, {{"T", "bf16_t"}, {"TC", "float"}}));
}

TEST(CudaKernelSources, AttentionCompilesForHeadDims) {
  const std::string prefill = std::string(ksrc::kAttentionCommon) + ksrc::kAttention + ksrc::kAttentionCombine;
  const std::string decode = std::string(ksrc::kAttentionCommon) + ksrc::kAttentionDecodeLoads + ksrc::kAttentionDecode;
  for (int hd : {4, 36, 64, 128, 256})
    for (const char* t : {"float", "bf16_t", "f16_t"}) {
      const std::string defs = "#define HD " + std::to_string(hd) + "\n";
      // the query rows per warp the lowering picks for this head_dim (16 / 8 / 4)
      const int rpw = hd <= 64 ? 16 : hd <= 128 ? 8 : 4;
      compiles("attention", kernel_source(prefill.c_str(), {{"T", t}, {"M", "u8_t"}},
                                          defs + "#define RPW " + std::to_string(rpw) + "\n"));
      const int bytes = hd * (std::string(t) == "float" ? 4 : 2);
      if (bytes % 16 == 0 && bytes / 16 <= 128 && ((bytes / 16) & (bytes / 16 - 1)) == 0)
        for (int rows : {1, 4, 8})
          compiles("attn_decode", kernel_source(decode.c_str(), {{"T", t}, {"M", "bf16_t"}},
                                                defs + "#define KC " + std::to_string(ksrc::kDecodeChunkKeys) +
                                                    "\n#define R " + std::to_string(rows) + "\n" +
                                                    (rows == 4 ? "#define K_STATIC 1\n#define V_STATIC 1\n" : "") +
                                                    // cached rows in shared memory; the cluster merge
                                                    (rows == 4 ? "#define SMKV 1\n#define CL 8\n" : "") +
                                                    (rows == 8 ? "#define CL 16\n#define NK 1\n#define NV 1\n" : "")));
    }
}

// The tensor-core attention for every head dim it takes, both half types, every mask, softcap
// and the tile shapes (warps, row tiles per warp, key tile, Q in registers).
TEST(CudaKernelSources, TensorCoreAttentionCompilesForHeadDimsMasksAndTiles) {
  auto src = [](const char* t, int hd, int nw, int mt, int bn, int mask, int cap, int qreg) {
    const std::string defs = "#define BF16 " + std::to_string(std::string(t) == "bf16_t") + "\n#define HD " +
                             std::to_string(hd) + "\n#define NW " + std::to_string(nw) + "\n#define MT " +
                             std::to_string(mt) + "\n#define BN " + std::to_string(bn) + "\n#define MASK " +
                             std::to_string(mask) + "\n#define SOFTCAP " + std::to_string(cap) + "\n#define QREG " +
                             std::to_string(qreg) + "\n" + ksrc::kTensorCoreHelpers + ksrc::kMma16816;
    return kernel_source(ksrc::kAttentionMma, {{"T", t}}, defs);
  };
  for (int hd : {16, 32, 64, 96, 128, 256}) {
    compiles("attention_mma bf16 causal", src("bf16_t", hd, 4, hd > 128 ? 1 : 2, 32, 1, 0, 0));
    compiles("attention_mma f16 window softcap", src("f16_t", hd, 4, 1, 64, 2, 1, hd <= 128 ? 1 : 0));
  }
  for (int nw : {1, 2, 8}) compiles("attention_mma tile", src("bf16_t", 64, nw, 2, 16 * nw, 0, 0, 1));
}

// The tensor-core decode kernel for every head dim it takes, both half types, every mask, softcap,
// up to 16 rows, leaf caches and the RoPEs rotated on load.
TEST(CudaKernelSources, TensorCoreDecodeAttentionCompiles) {
  auto src = [](const char* t, int hd, int rows, int mask, int cap, int statics, int rope, int warps = 8) {
    auto def = [](const char* n, int v) { return "#define " + std::string(n) + " " + std::to_string(v) + "\n"; };
    const std::string defs = def("BF16", std::string(t) == "bf16_t") + def("HD", hd) + def("R", rows) +
                             def("NW", warps) + def("BN", hd <= 64 ? 64 : 32) + def("MASK", mask) + def("SOFTCAP", cap) +
                             def("ROPE_STATIC", statics) +
                             def("K_STATIC", statics) + def("V_STATIC", statics) + def("ROPE_Q", rope) +
                             def("ROPE_K", rope) + def("NK", rope ? 2 : 0) + ksrc::kTensorCoreHelpers + ksrc::kMma16816;
    const std::string body = std::string(ksrc::kAttentionCommon) + ksrc::kAttentionDecodeLoads + ksrc::kAttentionDecodeTc;
    return kernel_source(body.c_str(), {{"T", t}, {"M", "u8_t"}, {"TC", "float"}}, defs);
  };
  for (int hd : {16, 64, 96, 128})
    for (int mask = 0; mask <= 4; ++mask) {
      SCOPED_TRACE("head_dim " + std::to_string(hd) + " mask " + std::to_string(mask));
      compiles("attn_decode_tc", src("bf16_t", hd, mask == 0 ? 16 : 4, mask, mask == 2, mask == 1, mask == 1));
      compiles("attn_decode_tc", src("f16_t", hd, 1, mask, 0, 0, 0));
    }
  for (int warps : {1, 4, 16}) compiles("attn_decode_tc warps", src("bf16_t", 64, 4, 1, 0, 1, 1, warps));
}

// The Hopper kernel (wgmma) for sm_90a, with the wrappers the lowering generates.
TEST(CudaKernelSources, WgmmaAttentionCompilesForSm90a) {
  auto src = [](DType t, int hd, int nwg, int bn, int stages, int minb, int mask, int cap) {
    const std::string defs = "#define BF16 " + std::to_string(t == DType::BF16) + "\n#define HD " + std::to_string(hd) +
                             "\n#define NWG " + std::to_string(nwg) + "\n#define BN " + std::to_string(bn) +
                             "\n#define STAGES " + std::to_string(stages) + "\n#define MINB " + std::to_string(minb) +
                             "\n#define PIPE " + std::to_string(minb == 1 ? 1 : 0) + "\n#define PREGS 24\n#define CREGS " + std::to_string(minb == 1 ? (nwg == 2 ? 240 : 160) : 0) +
                             "\n#define MASK " + std::to_string(mask) + "\n#define SOFTCAP " + std::to_string(cap) +
                             "\n" + ksrc::kTensorCoreHelpers + ksrc::kMma16816 + attention_wgmma_wrappers(t, bn, hd);
    return kernel_source(ksrc::kAttentionWgmma, {{"T", storage_type(t)}, {"M", mask >= 3 ? "u8_t" : storage_type(t)}}, defs);
  };
  for (int hd : {64, 128})
    for (int bn : {64, 128}) {
      SCOPED_TRACE("head_dim " + std::to_string(hd) + " keys " + std::to_string(bn));
      EXPECT_GT(nvrtc_compile("attention_wgmma", src(DType::BF16, hd, 2, bn, 2, 1, 1, 0), "sm_90a", true).size(), 100u);
      EXPECT_GT(nvrtc_compile("attention_wgmma", src(DType::F16, hd, 3, bn, 3, 1, 2, 1), "sm_90a", true).size(), 100u);
    }
  EXPECT_GT(nvrtc_compile("attention_wgmma", src(DType::BF16, 64, 1, 64, 2, 2, 0, 0), "sm_90a", true).size(), 100u);
  EXPECT_GT(nvrtc_compile("attention_wgmma", src(DType::BF16, 64, 1, 128, 2, 2, 3, 0), "sm_90a", true).size(), 100u);  // keep
  EXPECT_GT(nvrtc_compile("attention_wgmma", src(DType::F16, 128, 3, 64, 3, 1, 4, 1), "sm_90a", true).size(), 100u);  // bias
}

// The select family (kernels/select.h, scan.h, random.h, scatter.h) for every type the
// lowerings instantiate.
TEST(CudaKernelSources, SelectScanRandomScatterKernelsCompile) {
  const std::string common32 = std::string("#define KBITS 32\n") + ksrc::kSelectCommon;
  for (const char* t : {"float", "f16_t", "bf16_t"}) {
    compiles("arg_reduce", kernel_source(ksrc::kArgReduce, {{"T", t}, {"C", "float"}}, "#define LOAD_C(v) to_f(v)\n"));
    compiles("topk", kernel_source(ksrc::kTopK, {{"T", t}, {"KT", "unsigned"}},
                                   "#define RAW_KEY(v) float_key(to_f(v))\n" + common32));
    compiles("sample", kernel_source(ksrc::kSample, {{"T", t}, {"KT", "unsigned"}}, common32 + ksrc::kPhilox));
    compiles("rng", kernel_source(ksrc::kRng, {{"T", t}}, ksrc::kPhilox));

    compiles("scatter_add", kernel_source(ksrc::kScatterAdd, {{"T", t}, {"I", "i64_t"}}));
    for (int vw : {1, 4, 8})
      compiles("grouped_matmul", kernel_source(ksrc::kGroupedMatMul, {{"T", t}, {"I", "i32_t"}},
                                               "#define VW " + std::to_string(vw) + "\n"));
  }
  compiles("arg_reduce i64", kernel_source(ksrc::kArgReduce, {{"T", "i64_t"}, {"C", "long long"}},
                                           "#define LOAD_C(v) ((C)(v))\n"));
  compiles("topk i64", kernel_source(ksrc::kTopK, {{"T", "i64_t"}, {"KT", "unsigned long long"}},
                                     std::string("#define KBITS 64\n#define RAW_KEY(v) ((unsigned long long)(v))\n") +
                                         ksrc::kSelectCommon));
  compiles("arg_reduce f64", kernel_source(ksrc::kArgReduce, {{"T", "double"}, {"C", "double"}},
                                           "#define LOAD_C(v) ((C)(v))\n"));
  compiles("topk f64", kernel_source(ksrc::kTopK, {{"T", "double"}, {"KT", "unsigned long long"}},
                                     std::string("#define KBITS 64\n#define RAW_KEY(v) double_key(v)\n") +
                                         ksrc::kSelectCommon));
  compiles("scatter_add f64", kernel_source(ksrc::kScatterAdd, {{"T", "double"}, {"I", "i32_t"}}));
  for (const char* t : {"i8_t", "u8_t", "i16_t", "i32_t", "u32_t", "i64_t"})
    compiles("scatter_add int", kernel_source(ksrc::kScatterAdd, {{"T", t}, {"I", "u8_t"}}));
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I8, DType::U8, DType::I16, DType::I32,
                  DType::U32, DType::I64})
    compiles(std::string("cumsum ") + dtype_name(t), scan_source(t));
}

plan::ElementwiseGeom geom(std::vector<int64_t> out, std::vector<std::vector<int64_t>> strides) {
  plan::ElementwiseGeom g;
  g.out_dims = out;
  g.numel = product(out);
  g.in_strides = std::move(strides);
  return g;
}

TEST(CudaKernelSources, ElementwiseChainsCompileForEveryKind) {
  std::string src_all;
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    for (int k = 0; k <= static_cast<int>(ActKind::Acos); ++k) {
      const std::vector<RegionStep> chain{{RegionStepKind::Activation, k, DType::F32, {0}}};
      const auto kern = make_elementwise_kernel(chain, {t}, t, geom({8, 4}, {{4, 1}}), 4);
      compiles(std::string("act ") + enum_name(static_cast<ActKind>(k)), kern.source);
    }
    for (int k = 0; k <= static_cast<int>(BinaryKind::FMod); ++k) {
      const std::vector<RegionStep> chain{{RegionStepKind::Binary, k, DType::F32, {0, 1}}};
      const auto kern = make_elementwise_kernel(chain, {t, t}, t, geom({8, 4}, {{4, 1}, {0, 1}}), 4);
      EXPECT_EQ(kern.vec, 1);  // a broadcast row operand takes the index path
      compiles(std::string("binary ") + enum_name(static_cast<BinaryKind>(k)), kern.source);
    }
  }
  // Integer and bool kinds, compare, where and cast chains.
  for (DType t : {DType::I32, DType::I64, DType::U8, DType::I8, DType::U32}) {
    for (BinaryKind k : {BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul, BinaryKind::Max, BinaryKind::Min,
                         BinaryKind::And, BinaryKind::Or, BinaryKind::Xor, BinaryKind::Shl, BinaryKind::Shr}) {
      if ((k == BinaryKind::Shl || k == BinaryKind::Shr) && is_signed_int(t)) continue;  // unsigned only
      const std::vector<RegionStep> chain{{RegionStepKind::Binary, static_cast<int32_t>(k), DType::F32, {0, 1}}};
      compiles(std::string("int binary ") + enum_name(k),
               make_elementwise_kernel(chain, {t, t}, t, geom({16}, {{1}, {1}}), 8).source);
    }
    for (ActKind k : {ActKind::Neg, ActKind::Abs, ActKind::Relu, ActKind::Sign, ActKind::Not}) {
      const std::vector<RegionStep> chain{{RegionStepKind::Activation, static_cast<int32_t>(k), DType::F32, {0}}};
      compiles("int act", make_elementwise_kernel(chain, {t}, t, geom({16}, {{1}}), 8).source);
    }
  }
  const std::vector<RegionStep> chain{
      {RegionStepKind::Compare, static_cast<int32_t>(CompareKind::Lt), DType::F32, {0, 1}},
      {RegionStepKind::Where, 0, DType::F32, {-1, 0, 1}},
      {RegionStepKind::Cast, 0, DType::I64, {-2}},
      {RegionStepKind::Cast, 0, DType::Bool, {-3}},
      {RegionStepKind::Activation, static_cast<int32_t>(ActKind::Not), DType::F32, {-4}},
  };
  const auto kern = make_elementwise_kernel(chain, {DType::BF16, DType::BF16}, DType::Bool,
                                            geom({3, 5, 7}, {{35, 7, 1}, {0, 1, 0}}), 8);
  compiles("region", kern.source);
  // The same chain in a kernel that lets its dependents launch before its own wait: only when
  // its 105 work items are within the limit.
  const auto early = make_elementwise_kernel(chain, {DType::BF16, DType::BF16}, DType::Bool,
                                             geom({3, 5, 7}, {{35, 7, 1}, {0, 1, 0}}), 8, 105);
  const auto over = make_elementwise_kernel(chain, {DType::BF16, DType::BF16}, DType::Bool,
                                            geom({3, 5, 7}, {{35, 7, 1}, {0, 1, 0}}), 8, 104);
  EXPECT_TRUE(early.early_dependents);
  EXPECT_FALSE(over.early_dependents);
  EXPECT_FALSE(kern.early_dependents);
  EXPECT_NE(early.source.find("rlx_pdl_begin_after_dependents();"), std::string::npos);
  EXPECT_EQ(over.source.find("rlx_pdl_begin_after_dependents();"), std::string::npos);
  EXPECT_EQ(kern.source.find("rlx_pdl_begin_after_dependents();"), std::string::npos);
  compiles("region, early dependents", early.source);
}

TEST(CudaKernelSources, VectorWidthFollowsAlignmentAndSize) {
  const std::vector<RegionStep> add{{RegionStepKind::Binary, 0, DType::F32, {0, 1}}};
  EXPECT_EQ(make_elementwise_kernel(add, {DType::F32, DType::F32}, DType::F32, geom({64}, {{1}, {1}}), 8).vec, 4);
  EXPECT_EQ(make_elementwise_kernel(add, {DType::BF16, DType::BF16}, DType::BF16, geom({64}, {{1}, {0}}), 8).vec, 8);
  EXPECT_EQ(make_elementwise_kernel(add, {DType::F32, DType::F32}, DType::F32, geom({6}, {{1}, {1}}), 8).vec, 2);
  EXPECT_EQ(make_elementwise_kernel(add, {DType::F32, DType::F32}, DType::F32, geom({64}, {{1}, {1}}), 1).vec, 1);
}

TEST(CudaKernelSources, UnsupportedChainsAreRejectedWithAReason) {
  std::string why;
  const std::vector<RegionStep> add{{RegionStepKind::Binary, static_cast<int32_t>(BinaryKind::Add), DType::F32, {0, 1}}};
  EXPECT_FALSE(elementwise_supported(add, {DType::Bool, DType::Bool}, &why));
  EXPECT_NE(why.find("add"), std::string::npos) << why;
  EXPECT_NE(why.find("bool"), std::string::npos) << why;
  const std::vector<RegionStep> exp{{RegionStepKind::Activation, static_cast<int32_t>(ActKind::Exp), DType::F32, {0}}};
  EXPECT_FALSE(elementwise_supported(exp, {DType::I32}, &why));
  EXPECT_NE(why.find("exp"), std::string::npos) << why;
  EXPECT_TRUE(elementwise_supported(exp, {DType::F64}, &why));
  const std::vector<RegionStep> div{{RegionStepKind::Binary, static_cast<int32_t>(BinaryKind::Div), DType::F32, {0, 1}}};
  EXPECT_TRUE(elementwise_supported(div, {DType::I32, DType::I32}, &why));
  EXPECT_TRUE(elementwise_supported(div, {DType::F64, DType::F64}, &why));
}

// f64 chains compute in double: double math functions and literals, no f32 rounding step.
TEST(CudaKernelSources, F64ChainsComputeInDouble) {
  for (int k = 0; k <= static_cast<int>(ActKind::Acos); ++k) {
    if (static_cast<ActKind>(k) == ActKind::Not) continue;
    const std::vector<RegionStep> chain{{RegionStepKind::Activation, k, DType::F32, {0}}};
    const auto kern = make_elementwise_kernel(chain, {DType::F64}, DType::F64, geom({8, 4}, {{4, 1}}), 4);
    compiles(std::string("f64 act ") + enum_name(static_cast<ActKind>(k)), kern.source);
    const std::string body = kern.source.substr(kern.source.find("rlx_elementwise"));
    for (const char* f32_only : {"expf(", "erff(", "tanhf(", "logf(", "sqrtf(", "0.5f", "1.f"})
      EXPECT_EQ(body.find(f32_only), std::string::npos) << enum_name(static_cast<ActKind>(k)) << ": " << f32_only;
    EXPECT_NE(body.find("const double v0"), std::string::npos) << body;
  }
  for (int k = 0; k <= static_cast<int>(BinaryKind::FMod); ++k) {
    const std::vector<RegionStep> chain{{RegionStepKind::Binary, k, DType::F32, {0, 1}}};
    compiles(std::string("f64 binary ") + enum_name(static_cast<BinaryKind>(k)),
             make_elementwise_kernel(chain, {DType::F64, DType::F64}, DType::F64, geom({16}, {{1}, {1}}), 8).source);
  }
  // Casts into and out of f64, a compare and a where on f64.
  const std::vector<RegionStep> casts{
      {RegionStepKind::Cast, 0, DType::F64, {0}},
      {RegionStepKind::Compare, static_cast<int32_t>(CompareKind::Gt), DType::F32, {-1, 1}},
      {RegionStepKind::Where, 0, DType::F32, {-2, -1, 1}},
      {RegionStepKind::Cast, 0, DType::F16, {-3}},
  };
  compiles("f64 casts", make_elementwise_kernel(casts, {DType::F32, DType::F64}, DType::F16,
                                                geom({4, 4}, {{4, 1}, {0, 1}}), 8).source);
}

// Integer Div / Mod / FMod / Pow take the run's error flag (zero divisors); nothing else does.
TEST(CudaKernelSources, IntegerDivisionChainsTakeTheErrorFlag) {
  for (DType t : {DType::I8, DType::U8, DType::I16, DType::I32, DType::U32, DType::I64})
    for (BinaryKind k : {BinaryKind::Div, BinaryKind::Mod, BinaryKind::FMod, BinaryKind::Pow}) {
      const std::vector<RegionStep> chain{{RegionStepKind::Binary, static_cast<int32_t>(k), DType::F32, {0, 1}}};
      const auto kern = make_elementwise_kernel(chain, {t, t}, t, geom({16}, {{1}, {0}}), 8);
      EXPECT_TRUE(kern.error_flag) << dtype_name(t) << " " << enum_name(k);
      EXPECT_NE(kern.source.find("int* err"), std::string::npos);
      compiles(std::string("int ") + dtype_name(t) + " " + enum_name(k), kern.source);
    }
  const std::vector<RegionStep> fdiv{{RegionStepKind::Binary, static_cast<int32_t>(BinaryKind::Div), DType::F32, {0, 1}}};
  EXPECT_FALSE(make_elementwise_kernel(fdiv, {DType::F32, DType::F32}, DType::F32, geom({16}, {{1}, {1}}), 8).error_flag);
  EXPECT_EQ(elementwise_error_message(kErrIntDivZero).find("division by zero") == std::string::npos, false);
  EXPECT_EQ(elementwise_error_message(99), "");  // codes 1-7 are the shared ones (codegen/language.h)
}

TEST(CudaKernelSources, CompileErrorNamesTheKernelAndCarriesTheLog) {
  const std::string msg = rlx::testing::error_message(
      [] { nvrtc_compile("broken_kernel", "extern \"C\" __global__ void broken_kernel() { undefined_name = 1; }", "sm_90"); });
  EXPECT_NE(msg.find("broken_kernel"), std::string::npos) << msg;
  EXPECT_NE(msg.find("undefined_name"), std::string::npos) << msg;
}

}  // namespace
#endif  // RLX_HAVE_CUDA
