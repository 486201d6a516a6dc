// The exact integer ops MatMulInteger and ConvInteger against direct integer loops (int64 sums,
// wrapped to int32 like the ops): u8 / i8 mixes, one and per-row / per-column / per-channel zero
// points, batch broadcast, groups, padding, strides, dilations, sums past 2^24 (where an f32
// accumulation is no longer exact) and past 2^31 (wrapping), the AVX2 tile against the portable
// one, and the verifier's errors.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/int_gemm.h"
#include "passes/legalize.h"
#include "runtime/backend.h"
#include "support/integer_reference.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using namespace rlx::testing;

Tensor rand_int8(DType t, std::vector<int64_t> shape, uint64_t seed, int lo, int hi) {
  return random_ints(t, std::move(shape), seed, lo, hi);
}
Tensor rand_int8(DType t, std::vector<int64_t> shape, uint64_t seed) { return random_int8(t, std::move(shape), seed); }
std::vector<int64_t> ints(const Tensor& t) { return int_values(t); }

::testing::AssertionResult same_ints(const Tensor& y, const std::vector<int64_t>& dims, const std::vector<int32_t>& want) {
  if (y.dtype() != DType::I32) return ::testing::AssertionFailure() << "dtype " << dtype_name(y.dtype());
  if (y.shape() != dims) return ::testing::AssertionFailure() << "shape " << dims_str(y.shape()) << " vs " << dims_str(dims);
  const int32_t* p = y.data<int32_t>();
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < want.size(); ++i)
    if (p[i] != want[i]) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << want.size() << " differ; first at " << first << ": "
                                       << p[first] << " vs " << want[static_cast<size_t>(first)];
}

// ---- MatMulInteger ------------------------------------------------------------------------
struct MmCase {
  std::vector<int64_t> a, b;       // operand dims
  std::vector<int64_t> za, zb;     // zero point dims ({} = one value)
  DType ta = DType::U8, tb = DType::U8;
};

void check_matmul_integer(const MmCase& c, uint64_t seed) {
  SCOPED_TRACE("a " + dims_str(c.a) + " " + dtype_name(c.ta) + ", b " + dims_str(c.b) + " " + dtype_name(c.tb) +
               ", a_zero " + dims_str(c.za) + ", b_zero " + dims_str(c.zb));
  const Tensor a = rand_int8(c.ta, c.a, seed), b = rand_int8(c.tb, c.b, seed + 1);
  const Tensor za = rand_int8(c.ta, c.za, seed + 2), zb = rand_int8(c.tb, c.zb, seed + 3);
  const Tensor y = run_op(ops::MatMulInteger{}, {a, b, za, zb});
  std::vector<int64_t> dims;
  const auto want = ref_matmul_integer(c.a, ints(a), c.b, ints(b), ints(za), ints(zb), dims);
  EXPECT_TRUE(same_ints(y, dims, want));
}

TEST(MatMulIntegerOp, MatchesReferenceForEveryDtypeMix) {
  const DType ts[] = {DType::U8, DType::I8};
  uint64_t seed = 1;
  for (DType ta : ts)
    for (DType tb : ts) {
      check_matmul_integer({{7, 13}, {13, 19}, {}, {}, ta, tb}, seed++);            // tails of rows, columns, odd K
      check_matmul_integer({{6, 32}, {32, 16}, {6, 1}, {1, 16}, ta, tb}, seed++);  // per-row / per-column
      check_matmul_integer({{25, 70}, {70, 40}, {25, 1}, {}, ta, tb}, seed++);
    }
}

TEST(MatMulIntegerOp, BatchesBroadcastAndOneDimOperands) {
  check_matmul_integer({{2, 1, 5, 9}, {3, 9, 17}, {}, {}, DType::U8, DType::I8}, 11);
  check_matmul_integer({{2, 1, 5, 9}, {3, 9, 17}, {2, 1, 5, 1}, {3, 1, 17}, DType::I8, DType::U8}, 12);
  check_matmul_integer({{4, 9}, {3, 9, 2}, {4, 1}, {3, 1, 2}, DType::U8, DType::U8}, 13);  // a broadcast over b's batch
  check_matmul_integer({{9}, {9, 5}, {}, {1, 5}, DType::U8, DType::I8}, 14);               // 1-d a
  check_matmul_integer({{4, 9}, {9}, {4, 1}, {}, DType::I8, DType::I8}, 15);               // 1-d b
  check_matmul_integer({{9}, {9}, {}, {}, DType::U8, DType::U8}, 16);                      // dot
  check_matmul_integer({{0, 9}, {9, 3}, {}, {}, DType::U8, DType::U8}, 17);                // M = 0
  check_matmul_integer({{3, 0}, {0, 4}, {}, {}, DType::U8, DType::U8}, 18);                // K = 0: zeros
}

// K = 4608 with every term +-255*128 or 255*255: sums of ~1.5e8 (an f32 accumulator rounds
// them: 2^24 is exceeded by K >= ~520 for such values), exact here.
TEST(MatMulIntegerOp, LargeKIsExact) {
  const int64_t M = 7, K = 4608, N = 21;
  const Tensor a = rand_int8(DType::U8, {M, K}, 3, 250, 255);
  const Tensor b = rand_int8(DType::I8, {K, N}, 4, -128, -120);
  const Tensor za = from_doubles(DType::U8, {}, {0});
  const Tensor zb = from_doubles(DType::I8, {}, {0});
  const Tensor y = run_op(ops::MatMulInteger{}, {a, b, za, zb});
  std::vector<int64_t> dims;
  const auto want = ref_matmul_integer({M, K}, ints(a), {K, N}, ints(b), {0}, {0}, dims);
  EXPECT_TRUE(same_ints(y, dims, want));
  EXPECT_LT(want[0], -(int64_t{1} << 24) * 8);  // far past f32's exact integers
  // The all-extreme case: every term 255 * -128.
  const Tensor a2 = from_doubles(DType::U8, {1, K}, std::vector<double>(K, 255));
  const Tensor b2 = from_doubles(DType::I8, {K, 1}, std::vector<double>(K, -128));
  const Tensor y2 = run_op(ops::MatMulInteger{}, {a2, b2, za, zb});
  EXPECT_EQ(y2.data<int32_t>()[0], -255 * 128 * K);
}

// Past 2^31 the sum wraps modulo 2^32 (ONNX: "the accumulation may overflow if and only if in
// 32 bits"): (255 - 0) * (0 - 255) over 40000 terms.
TEST(MatMulIntegerOp, SumsPastInt32Wrap) {
  const int64_t K = 40000;
  const Tensor a = from_doubles(DType::U8, {2, K}, std::vector<double>(2 * K, 255));
  const Tensor b = from_doubles(DType::U8, {K, 3}, std::vector<double>(3 * K, 0));
  const Tensor za = from_doubles(DType::U8, {}, {0});
  const Tensor zb = from_doubles(DType::U8, {}, {255});
  const Tensor y = run_op(ops::MatMulInteger{}, {a, b, za, zb});
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(y.data<int32_t>()[i], wrap32(-int64_t{65025} * K));
}

TEST(MatMulIntegerOp, VerifierNamesWhatIsWrong) {
  auto err = [](std::vector<Shape> s) {
    return error_message([&] {
      Graph g;
      std::vector<Value> vs;
      for (size_t i = 0; i < s.size(); ++i) vs.push_back(g.input("x" + std::to_string(i), s[i]));
      g.apply(ops::MatMulInteger{}, vs);
    });
  };
  const Shape u8s({}, DType::U8), i8s({}, DType::I8);
  EXPECT_THAT(err({Shape({2, 3}, DType::F32), Shape({3, 4}, DType::U8), u8s, u8s}), HasSubstr("must be u8 or i8"));
  EXPECT_THAT(err({Shape({2, 3}, DType::U8), Shape({3, 4}, DType::I32), u8s, u8s}), HasSubstr("must be u8 or i8"));
  EXPECT_THAT(err({Shape({2, 3}, DType::U8), Shape({4, 4}, DType::U8), u8s, u8s}), HasSubstr("contracting dims differ"));
  EXPECT_THAT(err({Shape({2, 3}, DType::U8), Shape({3, 4}, DType::I8), i8s, i8s}), HasSubstr("a_zero"));
  EXPECT_THAT(err({Shape({2, 3}, DType::U8), Shape({3, 4}, DType::I8), u8s, u8s}), HasSubstr("b_zero"));
  EXPECT_THAT(err({Shape({2, 3}, DType::U8), Shape({3, 4}, DType::U8), Shape({3, 1}, DType::U8), u8s}),
              HasSubstr("one per row"));
  EXPECT_THAT(err({Shape({2, 3}, DType::U8), Shape({3, 4}, DType::U8), u8s, Shape({4}, DType::U8)}),
              HasSubstr("one per column"));
  EXPECT_THAT(err({Shape({2, 3}, DType::U8), Shape({3, 4}, DType::U8), u8s}), HasSubstr("input"));  // arity
}

// ---- ConvInteger --------------------------------------------------------------------------
struct CvCase {
  std::vector<int64_t> x, w;
  std::vector<int64_t> stride, pads, dilation;
  int64_t groups = 1;
  bool per_channel = false;
  DType tx = DType::U8, tw = DType::U8;
};

std::vector<int32_t> ref_conv(const CvCase& c, const std::vector<int64_t>& x, const std::vector<int64_t>& w, int64_t zx,
                              const std::vector<int64_t>& zw, std::vector<int64_t>& yd) {
  return ref_conv_integer(c.x, x, c.w, w, zx, zw, {c.stride, c.pads, c.dilation, c.groups}, yd);
}

void check_conv_integer(const CvCase& c, uint64_t seed) {
  SCOPED_TRACE("x " + dims_str(c.x) + " " + dtype_name(c.tx) + ", w " + dims_str(c.w) + " " + dtype_name(c.tw) +
               ", stride " + dims_str(c.stride) + ", pads " + dims_str(c.pads) + ", dilation " + dims_str(c.dilation) +
               ", groups " + std::to_string(c.groups) + (c.per_channel ? ", per-channel w_zero" : ""));
  const Tensor x = rand_int8(c.tx, c.x, seed), w = rand_int8(c.tw, c.w, seed + 1);
  const Tensor zx = rand_int8(c.tx, {}, seed + 2);
  const Tensor zw = rand_int8(c.tw, c.per_channel ? std::vector<int64_t>{c.w[0]} : std::vector<int64_t>{}, seed + 3);
  ops::ConvInteger op;
  op.stride = c.stride;
  op.pads = c.pads;
  op.dilation = c.dilation;
  op.groups = c.groups;
  const Tensor y = run_op(op, {x, w, zx, zw});
  std::vector<int64_t> yd;
  const auto want = ref_conv(c, ints(x), ints(w), ints(zx)[0], ints(zw), yd);
  EXPECT_TRUE(same_ints(y, yd, want));
}

TEST(ConvIntegerOp, MatchesReferenceForEveryDtypeMix) {
  const DType ts[] = {DType::U8, DType::I8};
  uint64_t seed = 100;
  for (DType tx : ts)
    for (DType tw : ts) {
      check_conv_integer({{1, 3, 9, 11}, {5, 3, 3, 3}, {}, {1, 1, 1, 1}, {}, 1, false, tx, tw}, seed++);
      check_conv_integer({{2, 4, 8, 8}, {7, 4, 3, 3}, {2, 2}, {0, 1, 2, 0}, {}, 1, true, tx, tw}, seed++);
    }
}

TEST(ConvIntegerOp, WindowsGroupsAndRanks) {
  uint64_t seed = 200;
  const std::vector<CvCase> cases = {
      {{1, 2, 17}, {3, 2, 4}, {2}, {1, 2}, {2}, 1, true},                        // 1-d, stride, dilation
      {{1, 4, 10, 9}, {6, 2, 3, 2}, {1, 2}, {2, 0, 1, 1}, {2, 1}, 2, true},       // groups
      {{2, 6, 7, 7}, {6, 1, 3, 3}, {}, {1, 1, 1, 1}, {}, 6, true},                // depthwise
      {{1, 4, 6, 6}, {8, 1, 3, 3}, {2, 2}, {1, 1, 1, 1}, {}, 4, false},           // depthwise x2 channels
      {{1, 8, 5, 5}, {16, 8, 1, 1}, {}, {}, {}, 1, true},                         // pointwise
      {{1, 3, 4, 5, 6}, {4, 3, 2, 3, 2}, {1, 2, 1}, {1, 0, 1, 0, 1, 1}, {}, 1, true},  // 3-d
      {{1, 2, 5, 5}, {3, 2, 5, 5}, {}, {}, {}, 1, false},                         // one output position
      {{1, 3, 40, 37}, {20, 3, 3, 3}, {1, 1}, {1, 1, 1, 1}, {}, 1, true},         // several column chunks
  };
  for (const CvCase& c : cases) check_conv_integer(c, seed++);
  CvCase mixed = cases[1];
  mixed.tx = DType::I8;
  check_conv_integer(mixed, seed++);
}

// K = 512 x 3 x 3 = 4608 with extreme values: sums far past 2^24, exact.
TEST(ConvIntegerOp, LargeKIsExact) {
  CvCase c{{1, 512, 5, 5}, {3, 512, 3, 3}, {}, {1, 1, 1, 1}, {}, 1, true, DType::U8, DType::I8};
  const Tensor x = rand_int8(DType::U8, c.x, 5, 250, 255);
  const Tensor w = rand_int8(DType::I8, c.w, 6, -128, -125);
  const Tensor zx = from_doubles(DType::U8, {}, {0});
  const Tensor zw = from_doubles(DType::I8, {3}, {0, 1, -1});
  ops::ConvInteger op;
  op.pads = c.pads;
  const Tensor y = run_op(op, {x, w, zx, zw});
  std::vector<int64_t> yd;
  const auto want = ref_conv(c, ints(x), ints(w), 0, ints(zw), yd);
  EXPECT_TRUE(same_ints(y, yd, want));
  EXPECT_LT(want[12], -(int64_t{1} << 27));  // the centre position sums all 4608 terms
}

TEST(ConvIntegerOp, VerifierNamesWhatIsWrong) {
  auto err = [](std::vector<Shape> s, int64_t groups = 1) {
    return error_message([&] {
      Graph g;
      std::vector<Value> vs;
      for (size_t i = 0; i < s.size(); ++i) vs.push_back(g.input("x" + std::to_string(i), s[i]));
      ops::ConvInteger op;
      op.groups = groups;
      g.apply(op, vs);
    });
  };
  const Shape x({1, 4, 5, 5}, DType::U8), w({6, 4, 3, 3}, DType::I8);
  const Shape u8s({}, DType::U8), i8s({}, DType::I8);
  EXPECT_THAT(err({Shape({1, 4, 5, 5}, DType::F32), w, u8s, i8s}), HasSubstr("must be u8 or i8"));
  EXPECT_THAT(err({x, Shape({6, 4, 3, 3}, DType::I32), u8s, i8s}), HasSubstr("must be u8 or i8"));
  EXPECT_THAT(err({x, w, i8s, i8s}), HasSubstr("x_zero"));
  EXPECT_THAT(err({x, w, u8s, u8s}), HasSubstr("w_zero"));
  EXPECT_THAT(err({x, w, Shape({4}, DType::U8), i8s}), HasSubstr("one value"));
  EXPECT_THAT(err({x, w, u8s, Shape({4}, DType::I8)}), HasSubstr("one per output channel (6)"));
  EXPECT_THAT(err({x, Shape({6, 3, 3, 3}, DType::I8), u8s, i8s}), HasSubstr("channel mismatch"));
  EXPECT_THAT(err({x, w, u8s, i8s}, 3), HasSubstr("divisible by groups"));
  EXPECT_THAT(err({x, Shape({6, 4, 7, 7}, DType::I8), u8s, i8s}), HasSubstr("larger than the padded input"));
}

// Every tile path the CPU has, forced through the whole op (packing helpers included).
TEST(IntegerOpsPaths, EveryTileGivesTheReferenceBits) {
  struct Restore {
    ~Restore() { cpu::int_gemm_force_path(cpu::IntPath::Auto); }
  } restore;
  for (cpu::IntPath p : {cpu::IntPath::Portable, cpu::IntPath::Avx2, cpu::IntPath::Vnni}) {
    SCOPED_TRACE("path " + std::to_string(static_cast<int>(p)));
    cpu::int_gemm_force_path(p);
    check_matmul_integer({{2, 7, 45}, {45, 35}, {2, 7, 1}, {1, 35}, DType::U8, DType::I8}, 300);
    check_conv_integer({{2, 4, 10, 9}, {6, 2, 3, 2}, {1, 2}, {2, 0, 1, 1}, {2, 1}, 2, true, DType::I8, DType::U8}, 301);
    check_conv_integer({{1, 3, 21, 40}, {7, 3, 3, 3}, {}, {1, 1, 1, 1}, {}, 1, true, DType::U8, DType::U8}, 302);
  }
}

// ---- the integer product's tiles ----------------------------------------------------------
// The AVX2 and VNNI tiles give the portable tile's bits for every block height and panel width,
// values at the extremes of the packed range included.
TEST(IntGemmTile, Avx2AndVnniMatchPortable) {
  if (!cpu::int_gemm_avx2_usable()) GTEST_SKIP() << "no AVX2";
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> v(-255, 255);
  for (int64_t kp : {int64_t{1}, int64_t{3}, int64_t{64}, int64_t{2304}}) {
    std::vector<int16_t> a(static_cast<size_t>(kp * cpu::kIntRows * 2)), b(static_cast<size_t>(kp * cpu::kIntCols * 2));
    for (auto& e : a) e = static_cast<int16_t>(kp == 2304 ? 255 : v(rng));
    for (auto& e : b) e = static_cast<int16_t>(kp == 2304 ? -255 : v(rng));
    for (int64_t rows = 1; rows <= cpu::kIntRows; ++rows)
      for (int64_t cols : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{16}}) {
        std::vector<int32_t> c1(static_cast<size_t>(rows * 20), -1), c2(c1);
        cpu::int_tile_portable(rows, cols, kp, a.data(), b.data(), c1.data(), 20);
        cpu::int_tile_avx2(rows, cols, kp, a.data(), b.data(), c2.data(), 20);
        EXPECT_EQ(c1, c2) << "kp " << kp << " rows " << rows << " cols " << cols;
        if (cpu::int_gemm_vnni_usable()) {
          std::vector<int32_t> c3(c1.size(), -1);
          cpu::int_tile_vnni(rows, cols, kp, a.data(), b.data(), c3.data(), 20);
          EXPECT_EQ(c1, c3) << "vnni: kp " << kp << " rows " << rows << " cols " << cols;
        }
        if (kp == 2304) {
          EXPECT_EQ(c1[0], -255 * 255 * 2 * kp);
        }
        EXPECT_EQ(c1[static_cast<size_t>(cols)], -1);  // nothing past the panel's columns
      }
  }
}

// ---- GPU backends ---------------------------------------------------------------------------
// The GPU backends have no kernels for the integer ops: their claims refuse them by name and the
// shared legalize (no decomposition either) reports the node at compile time.
TEST(IntegerOpsOnGpu, RefusedWithTheReason) {
  Graph g;
  Value x = g.input("x", Shape({1, 2, 5, 5}, DType::U8));
  Value zx = g.constant(Tensor::zeros(DType::U8, {}));
  Value w = g.constant(Tensor::zeros(DType::I8, {3, 2, 3, 3}));
  Value zw = g.constant(Tensor::zeros(DType::I8, {3}));
  Value y = g.apply(ops::ConvInteger{}, {x, w, zx, zw});
  Value a = g.input("a", Shape({4, 6}, DType::U8));
  Value m = g.apply(ops::MatMulInteger{}, {a, g.constant(Tensor::zeros(DType::U8, {6, 2})), zx, zx});
  g.add_output(y);
  g.add_output(m);
  for (Device d : {Device::Cuda, Device::Vulkan, Device::WebGpu}) {
    std::unique_ptr<Backend> be;
    try {
      be = make_backend_for_check(d);
    } catch (const Error&) {
      continue;  // not in this build
    }
    const passes::ClaimFn claims = [&](const Graph& gr, const Node& n) { return be->claims(gr, n); };
    const passes::ReasonFn why = [&](const Graph& gr, const Node& n) { return be->unclaimed_reason(gr, n); };
    const std::string msg = error_message([&] { passes::legalize(g, claims, device_name(d), why); });
    EXPECT_THAT(msg, HasSubstr("cannot run 2 node(s)")) << msg;
    EXPECT_THAT(msg, HasSubstr("no kernel for 'conv_integer'")) << msg;
    EXPECT_THAT(msg, HasSubstr("no kernel for 'matmul_integer'")) << msg;
    EXPECT_THAT(msg, HasSubstr("Device::Cpu")) << msg;
  }
}

}  // namespace
}  // namespace rlx
