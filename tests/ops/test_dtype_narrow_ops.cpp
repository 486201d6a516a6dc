// The dtypes added for ONNX (u16, u64 and the storage-only float8 / float4 / int4 / int2):
// names and sizes, the data movement ops on them (byte copies by element size) against
// index arithmetic written here, u16 / u64 integer arithmetic at the wrap-around edges and
// unsigned comparisons past 2^63, the graph refusing compute ops on storage-only dtypes with a
// readable error, .npy support, and the GPU backends refusing them with the reason (claims +
// the shared legalize; no GPU needed).
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "passes/legalize.h"
#include "runtime/backend.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using testing::error_message;
using testing::run_cpu;

const DType kNew[] = {DType::U16,        DType::U64,    DType::F8E4M3FN, DType::F8E4M3FNUZ, DType::F8E5M2,
                      DType::F8E5M2FNUZ, DType::F8E8M0, DType::F4E2M1,   DType::I4,         DType::U4,
                      DType::I2,         DType::U2};

TEST(NarrowDTypes, NamesSizesAndKinds) {
  for (DType t : kAllDTypes) EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
  EXPECT_THAT(error_message([] { dtype_from_name("f8"); }), HasSubstr("f8e4m3fn"));
  EXPECT_EQ(dtype_size(DType::U16), 2u);
  EXPECT_EQ(dtype_size(DType::U64), 8u);
  for (DType t : kNew) {
    if (t == DType::U16 || t == DType::U64) {
      EXPECT_TRUE(is_int(t) && !is_storage_only(t));
      continue;
    }
    EXPECT_TRUE(is_storage_only(t)) << dtype_name(t);
    EXPECT_FALSE(is_int(t) || is_float(t)) << dtype_name(t);
    EXPECT_EQ(dtype_size(t), 1u) << dtype_name(t);  // one element a byte in memory
  }
  EXPECT_EQ(dtype_bits(DType::I4), 4);
  EXPECT_EQ(dtype_bits(DType::F4E2M1), 4);
  EXPECT_EQ(dtype_bits(DType::U2), 2);
  EXPECT_EQ(dtype_bits(DType::F8E5M2), 8);
}

// A tensor of dtype t whose element i holds byte pattern (i * 37 + 11) for the 1-byte dtypes
// (a valid stored value: sub-byte integers wrapped), or the value i * 7 + 1 for the wider ones.
Tensor pattern(DType t, std::vector<int64_t> shape) {
  Tensor x = Tensor::empty(t, shape);
  const int64_t n = x.numel();
  auto* p = static_cast<uint8_t*>(x.raw());
  for (int64_t i = 0; i < n; ++i) {
    if (t == DType::U16) {
      reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(60000 + i * 7);
    } else if (t == DType::U64) {
      reinterpret_cast<uint64_t*>(p)[i] = (uint64_t{1} << 63) + static_cast<uint64_t>(i) * 7;
    } else {
      const auto b = static_cast<uint64_t>(i * 37 + 11);
      p[i] = is_narrow_int(t) ? narrow_int_wrap(t, b) : static_cast<uint8_t>(t == DType::F4E2M1 ? b & 0xF : b);
    }
  }
  return x;
}

// Element `i` of x as its bytes.
std::vector<uint8_t> elem(const Tensor& x, int64_t i) {
  const size_t s = dtype_size(x.dtype());
  const auto* p = static_cast<const uint8_t*>(x.raw()) + static_cast<size_t>(i) * s;
  return std::vector<uint8_t>(p, p + s);
}

TEST(NarrowDTypes, DataMovementCopiesBytes) {
  for (DType t : kNew) {
    SCOPED_TRACE(dtype_name(t));
    const Tensor x = pattern(t, {2, 3});
    Graph g;
    Value in = g.input("x", Shape({2, 3}, t));
    Value in2 = g.input("x2", Shape({2, 3}, t));
    Value cond = g.input("c", Shape({2, 3}, DType::Bool));
    g.add_output(g.transpose(in, {1, 0}), "transpose");
    g.add_output(g.concat({in, in2}, 0), "concat");
    g.add_output(g.narrow(in, 1, 1, 2), "narrow");
    g.add_output(g.gather(in, g.constant(Tensor::i64({3}, std::vector<int64_t>{2, 0, 2})), 1), "gather");
    g.add_output(g.reverse(in, {0, 1}), "reverse");
    g.add_output(g.expand(g.reshape(in, {Dim(2), Dim(1), Dim(3)}), {Dim(2), Dim(2), Dim(3)}), "expand");
    g.add_output(g.where(cond, in, in2), "where");
    g.add_output(g.cast(g.cast(in, DType::F32), t), "cast_round_trip");
    const std::vector<uint8_t> cv = {1, 0, 1, 0, 0, 1};
    const Tensor c = Tensor::boolean({2, 3}, cv);
    // the second operand: x's elements shifted by one
    Tensor y2 = Tensor::empty(t, {2, 3});
    for (int64_t i = 0; i < 6; ++i)
      std::memcpy(static_cast<uint8_t*>(y2.raw()) + i * dtype_size(t), elem(x, (i + 1) % 6).data(), dtype_size(t));
    const auto out = run_cpu(g, {{"x", x}, {"x2", y2}, {"c", c}});
    ASSERT_EQ(out.size(), 8u);
    for (const Tensor& o : out) EXPECT_EQ(o.dtype(), t);
    auto X = [&](int64_t r, int64_t col) { return elem(x, r * 3 + col); };
    auto Y = [&](int64_t r, int64_t col) { return elem(y2, r * 3 + col); };
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t col = 0; col < 2; ++col) EXPECT_EQ(elem(out[0], r * 2 + col), X(col, r));
    for (int64_t i = 0; i < 6; ++i) {
      EXPECT_EQ(elem(out[1], i), X(i / 3, i % 3));
      EXPECT_EQ(elem(out[1], 6 + i), Y(i / 3, i % 3));
    }
    for (int64_t r = 0; r < 2; ++r) {
      EXPECT_EQ(elem(out[2], r * 2), X(r, 1));
      EXPECT_EQ(elem(out[2], r * 2 + 1), X(r, 2));
      const int64_t idx[] = {2, 0, 2};
      for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(elem(out[3], r * 3 + j), X(r, idx[j]));
      for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(elem(out[4], r * 3 + j), X(1 - r, 2 - j));
      for (int64_t k = 0; k < 2; ++k)
        for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(elem(out[5], (r * 2 + k) * 3 + j), X(r, j));
      for (int64_t j = 0; j < 3; ++j) {
        const bool pick = static_cast<const uint8_t*>(c.raw())[r * 3 + j] != 0;
        EXPECT_EQ(elem(out[6], r * 3 + j), pick ? X(r, j) : Y(r, j));
      }
    }
    // the storage-only dtypes' and u16's values are exact in f32 (not NaN codes: compared apart)
    if (t != DType::U64)
      for (int64_t i = 0; i < 6; ++i) {
        const double v = x.to_f64()[static_cast<size_t>(i)];
        if (v == v) {
          EXPECT_EQ(elem(out[7], i), elem(x, i)) << "element " << i;
        }
      }
  }
}

TEST(NarrowDTypes, ComputeOpsAreRefusedWithTheReason) {
  for (DType t : {DType::F8E4M3FN, DType::F4E2M1, DType::I4, DType::U2, DType::F8E8M0}) {
    Graph g;
    Value x = g.input("x", Shape({4}, t));
    const std::string add = error_message([&] { g.add(x, x); });
    EXPECT_THAT(add, HasSubstr("storage-only")) << add;
    EXPECT_THAT(add, HasSubstr(dtype_name(t))) << add;
    EXPECT_THAT(add, HasSubstr("cast it to a compute dtype")) << add;
    EXPECT_THAT(error_message([&] { g.reduce(ReduceKind::Sum, x, {0}); }), HasSubstr("storage-only"));
    EXPECT_THAT(error_message([&] { g.compare(CompareKind::Lt, x, x); }), HasSubstr("storage-only"));
    EXPECT_THAT(error_message([&] { g.act(ActKind::Neg, x); }), HasSubstr("storage-only"));
    EXPECT_NO_THROW(g.cast(x, DType::F32));
  }
}

// ---- u16 / u64 arithmetic -----------------------------------------------------------------------
template <class T>
Tensor ints(std::vector<T> v) {
  return Tensor::of<T>({static_cast<int64_t>(v.size())}, v);
}
template <class T>
std::vector<T> values(const Tensor& t) {
  const T* p = t.data<T>();
  return std::vector<T>(p, p + t.numel());
}

template <class T>
void check_unsigned_arithmetic() {
  using L = std::numeric_limits<T>;
  const T big = L::max(), half = static_cast<T>(L::max() / 2 + 1);
  const Tensor a = ints<T>({big, 0, half, 7, 100, big});
  const Tensor b = ints<T>({1, 1, 2, 3, 7, big});
  auto bin = [&](BinaryKind k) { return values<T>(testing::run_op(ops::Binary{k}, {a, b})); };
  EXPECT_EQ(bin(BinaryKind::Add), (std::vector<T>{0, 1, static_cast<T>(half + 2), 10, 107, static_cast<T>(big - 1)}));
  EXPECT_EQ(bin(BinaryKind::Sub), (std::vector<T>{static_cast<T>(big - 1), big, static_cast<T>(half - 2), 4, 93, 0}));
  EXPECT_EQ(bin(BinaryKind::Mul), (std::vector<T>{big, 0, 0, 21, 700, 1}));
  EXPECT_EQ(bin(BinaryKind::Div), (std::vector<T>{big, 0, static_cast<T>(half / 2), 2, 14, 1}));
  EXPECT_EQ(bin(BinaryKind::Mod), (std::vector<T>{0, 0, 0, 1, 2, 0}));
  EXPECT_EQ(bin(BinaryKind::Max), (std::vector<T>{big, 1, half, 7, 100, big}));
  EXPECT_EQ(bin(BinaryKind::Min), (std::vector<T>{1, 0, 2, 3, 7, big}));
  // comparisons are unsigned (half >= 2^(bits-1) is not negative)
  const auto lt = testing::run_op(ops::Compare{CompareKind::Lt}, {a, b}).to_i64();
  EXPECT_EQ(lt, (std::vector<int64_t>{0, 1, 0, 0, 0, 0}));
  const auto ge = testing::run_op(ops::Compare{CompareKind::Ge}, {ints<T>({half, 1}), ints<T>({1, half})}).to_i64();
  EXPECT_EQ(ge, (std::vector<int64_t>{1, 0}));
  EXPECT_THAT(error_message([&] { testing::run_op(ops::Binary{BinaryKind::Div}, {a, ints<T>({1, 1, 1, 0, 1, 1})}); }),
              HasSubstr("division by zero"));
}

TEST(NarrowDTypes, U16Arithmetic) { check_unsigned_arithmetic<uint16_t>(); }
TEST(NarrowDTypes, U64Arithmetic) { check_unsigned_arithmetic<uint64_t>(); }

TEST(NarrowDTypes, U64CastsKeepTheValue) {
  const uint64_t top = std::numeric_limits<uint64_t>::max();
  const Tensor a = ints<uint64_t>({top, uint64_t{1} << 63, 5});
  EXPECT_EQ(values<uint64_t>(testing::run_op(ops::Cast{DType::U64}, {testing::run_op(ops::Cast{DType::F64}, {a})})),
            (std::vector<uint64_t>{top, uint64_t{1} << 63, 5}));  // 2^64 - 1 -> 2^64 (f64) -> saturates
  EXPECT_EQ(values<uint16_t>(testing::run_op(ops::Cast{DType::U16}, {a})), (std::vector<uint16_t>{65535, 0, 5}));
  EXPECT_EQ(testing::run_op(ops::Cast{DType::F32}, {ints<uint16_t>({65535})}).to_f64()[0], 65535.0);
}

TEST(NarrowDTypes, NpyHoldsU16AndU64AndRefusesStorageOnly) {
  const std::string dir = ::testing::TempDir();
  for (DType t : {DType::U16, DType::U64}) {
    const Tensor x = pattern(t, {2, 3});
    const std::string path = dir + "/narrow_" + dtype_name(t) + ".npy";
    save_npy(x, path);
    const Tensor y = load_npy(path);
    EXPECT_EQ(y.dtype(), t);
    EXPECT_EQ(std::memcmp(x.raw(), y.raw(), x.nbytes()), 0);
    std::filesystem::remove(path);
  }
  const std::string msg = error_message([&] { save_npy(pattern(DType::F8E4M3FN, {2}), dir + "/f8.npy"); });
  EXPECT_THAT(msg, HasSubstr("f8e4m3fn has no NumPy dtype"));
}

// ---- GPU backends ---------------------------------------------------------------------------------
TEST(NarrowDTypes, GpuBackendsRefuseThemWithTheReason) {
  for (DType t : {DType::F8E4M3FN, DType::I4, DType::U16, DType::U64}) {
    Graph g;
    Value x = g.input("x", Shape({4}, DType::F32));
    Value y = g.cast(g.cast(x, t), DType::F32);
    g.add_output(y);
    for (Device d : {Device::Cuda, Device::Vulkan, Device::WebGpu}) {
      std::unique_ptr<Backend> be;
      try {
        be = make_backend_for_check(d);
      } catch (const Error&) {
        continue;  // not in this build
      }
      SCOPED_TRACE(std::string(dtype_name(t)) + " on " + device_name(d));
      const passes::ClaimFn claims = [&](const Graph& gr, const Node& n) { return be->claims(gr, n); };
      const passes::ReasonFn why = [&](const Graph& gr, const Node& n) { return be->unclaimed_reason(gr, n); };
      const std::string msg = error_message([&] { passes::legalize(g, claims, device_name(d), why); });
      EXPECT_THAT(msg, HasSubstr(std::string("cannot hold ") + dtype_name(t) + " tensors")) << msg;
      EXPECT_THAT(msg, HasSubstr("on the CPU")) << msg;
    }
  }
}

}  // namespace
}  // namespace rlx
