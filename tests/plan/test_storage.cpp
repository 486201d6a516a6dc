// Storage dtypes: the memory plan holds each value as the device's storage dtype (here WGSL's
// capability table: bool/u8 as u32 words, i8..i64 as i32, f16/bf16 as f32), sizes and view
// offsets follow it, a dtype with no storage is an error naming the node, the dtype and the
// device; host <-> storage conversions round-trip and reject values that do not fit.
#include <gmock/gmock.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "codegen/language.h"
#include "plan/schedule.h"
#include "plan/storage.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using plan::Location;
using ::testing::HasSubstr;

plan::PlanOptions webgpu() {
  plan::PlanOptions o;
  o.device.device = "WebGPU";
  o.device.alignment = 256;
  o.device.storage = plan::StorageCaps::from([](DType t) { return codegen::wgsl_language().storage_dtype(t); });
  return o;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(StoragePlan, WgslTableSetsSizesOffsetsAndNarrowedValues) {
  Graph g;
  Value ids = g.input("ids", Shape::of({2, 3}, DType::I64));
  Value mask = g.input("mask", Shape::of({4, 3}, DType::Bool));
  Value h = g.input("h", Shape::of({2, 3}, DType::F16));
  Value rows = g.narrow(mask, 0, 1, 2);  // a view 1 row in: 3 u32 words
  Value sum = g.add(ids, ids);
  g.add_output(sum);
  g.add_output(g.where(rows, g.cast(h, DType::F32), g.cast(sum, DType::F32)));
  g.add_output(g.cast(rows, DType::U8));

  const plan::Schedule s = plan::build_schedule(g, webgpu());
  const plan::MemoryPlan& mp = s.memory;
  EXPECT_EQ(mp.at(ids).storage, DType::I32);
  EXPECT_EQ(mp.at(ids).bytes, 6 * 4);
  EXPECT_EQ(mp.at(mask).storage, DType::U32);
  EXPECT_EQ(mp.at(mask).bytes, 12 * 4);
  EXPECT_EQ(mp.at(h).storage, DType::F32);
  EXPECT_EQ(mp.at(h).bytes, 6 * 4);
  EXPECT_EQ(mp.at(rows).kind, Location::Kind::Leaf);
  EXPECT_EQ(mp.at(rows).offset, 3 * 4);
  EXPECT_EQ(mp.at(rows).bytes, 6 * 4);
  EXPECT_EQ(mp.at(sum).storage, DType::I32);
  EXPECT_EQ(mp.at(sum).bytes, 6 * 4);
  // i64 narrows to i32 (ids on upload, sum on readback); bool, u8 and f16 only widen.
  EXPECT_EQ(mp.narrowed, (std::vector<Value>{ids, sum}));

  // Steps see the logical dtype and the storage dtype.
  bool seen = false;
  for (const plan::Step& st : s.steps)
    if (st.node == sum.node) {
      seen = true;
      EXPECT_EQ(st.in[0].dtype, DType::I64);
      EXPECT_EQ(st.in[0].storage(), DType::I32);
      EXPECT_EQ(st.out[0].storage(), DType::I32);
    }
  EXPECT_TRUE(seen);
  EXPECT_EQ(s.outputs[2].storage(), DType::U32);
  EXPECT_EQ(s.outputs[2].loc.bytes, 6 * 4);
}

TEST(StoragePlan, F64WithoutStorageIsAnErrorNamingNodeDtypeAndDevice) {
  Graph g;
  Value x = g.input("x", Shape::of({4}));
  Value d = g.cast(x, DType::F64);
  g.add_output(g.exp(d));
  const std::string m = error_of([&] { plan::plan_memory(g, webgpu()); });
  EXPECT_THAT(m, HasSubstr(node_label(g.node(d.node))));
  EXPECT_THAT(m, HasSubstr("f64"));
  EXPECT_THAT(m, HasSubstr("WebGPU cannot hold"));
  EXPECT_THAT(m, HasSubstr("cast it to f32"));

  Graph g2;
  Value y = g2.input("y", Shape::of({4}, DType::F64));
  g2.add_output(g2.exp(y));
  const std::string m2 = error_of([&] { plan::build_schedule(g2, webgpu()); });
  EXPECT_THAT(m2, HasSubstr(node_label(g2.node(y.node))));
  EXPECT_THAT(m2, HasSubstr("give this input/weight as f32"));
  // The same graphs plan on a device that holds f64.
  EXPECT_NO_THROW(plan::plan_memory(g));
  EXPECT_NO_THROW(plan::plan_memory(g2));
}

TEST(StoragePlan, IdentityTablesChangeNothing) {
  EXPECT_TRUE(plan::StorageCaps{}.is_identity());
  auto of = [](const codegen::Language& l) {
    return plan::StorageCaps::from([&](DType t) { return l.storage_dtype(t); });
  };
  // CUDA and GLSL hold every dtype a GPU runs as itself, and refuse u16, u64 and the
  // storage-only dtypes (rlx runs those on the CPU).
  for (const codegen::Language* l : {&codegen::cuda_language(), &codegen::glsl_language()}) {
    const plan::StorageCaps caps = of(*l);
    for (DType t : kAllDTypes)
      EXPECT_EQ(caps.storage(t), codegen::Language::gpu_dtype(t) ? std::optional<DType>(t) : std::nullopt)
          << l->name() << " " << dtype_name(t);
  }
  EXPECT_FALSE(of(codegen::wgsl_language()).is_identity());
}

TEST(StorageConvert, NarrowsOnlyWhereValuesCanChange) {
  using plan::storage_narrows;
  EXPECT_TRUE(storage_narrows(DType::I64, DType::I32));
  EXPECT_TRUE(storage_narrows(DType::U32, DType::I32));
  EXPECT_TRUE(storage_narrows(DType::F32, DType::F16));
  EXPECT_TRUE(storage_narrows(DType::F16, DType::BF16));
  EXPECT_TRUE(storage_narrows(DType::BF16, DType::F16));
  EXPECT_TRUE(storage_narrows(DType::F32, DType::I32));
  EXPECT_FALSE(storage_narrows(DType::I32, DType::I64));
  EXPECT_FALSE(storage_narrows(DType::I8, DType::I32));
  EXPECT_FALSE(storage_narrows(DType::I16, DType::I32));
  EXPECT_FALSE(storage_narrows(DType::U8, DType::U32));
  EXPECT_FALSE(storage_narrows(DType::Bool, DType::U32));
  EXPECT_FALSE(storage_narrows(DType::F16, DType::F32));
  EXPECT_FALSE(storage_narrows(DType::BF16, DType::F32));
  EXPECT_FALSE(storage_narrows(DType::F32, DType::F32));
}

// host -> storage -> host gives the same bytes, and the storage words hold the same values.
template <class T, class S>
void round_trip(std::vector<T> values, DType storage) {
  const Tensor host = Tensor::of<T>({static_cast<int64_t>(values.size())}, values);
  SCOPED_TRACE(std::string(dtype_name(host.dtype())) + " as " + dtype_name(storage));
  const std::vector<uint8_t> bytes = plan::to_storage(host, storage, "input 'v'");
  ASSERT_EQ(bytes.size(), values.size() * sizeof(S));
  for (size_t i = 0; i < values.size(); ++i) {
    S w;
    std::memcpy(&w, bytes.data() + i * sizeof(S), sizeof(S));
    EXPECT_EQ(to_double(w), to_double(values[i])) << "element " << i;
  }
  const Tensor back = plan::from_storage(bytes, storage, host.dtype(), host.shape(), "output 0");
  ASSERT_EQ(back.dtype(), host.dtype());
  EXPECT_EQ(0, std::memcmp(back.raw(), host.raw(), host.nbytes()));
}

TEST(StorageConvert, WideningRoundTrips) {
  round_trip<int64_t, int32_t>({0, -1, 7, INT32_MAX, INT32_MIN}, DType::I32);
  round_trip<int8_t, int32_t>({0, -128, 127, 5}, DType::I32);
  round_trip<int16_t, int32_t>({0, -32768, 32767, -5}, DType::I32);
  round_trip<uint8_t, uint32_t>({0, 255, 1, 128}, DType::U32);
  round_trip<int32_t, int32_t>({3, -4}, DType::I32);
  {  // bool as u32 words of 0/1
    const std::vector<uint8_t> v{1, 0, 1, 1};
    const Tensor host = Tensor::boolean({4}, v);
    const auto bytes = plan::to_storage(host, DType::U32, "input 'm'");
    std::vector<uint32_t> words(4);
    std::memcpy(words.data(), bytes.data(), 16);
    EXPECT_EQ(words, (std::vector<uint32_t>{1, 0, 1, 1}));
    EXPECT_EQ(0, std::memcmp(plan::from_storage(bytes, DType::U32, DType::Bool, {4}, "o").raw(), v.data(), 4));
    // A device truth word other than 1 still reads back as true.
    const std::vector<uint32_t> any{0, 7, 0xffffffffu};
    const Tensor t = plan::from_storage({reinterpret_cast<const uint8_t*>(any.data()), 12}, DType::U32, DType::Bool,
                                        {3}, "o");
    EXPECT_EQ(t.to_i64(), (std::vector<int64_t>{0, 1, 1}));
  }
  std::vector<f16> h;
  std::vector<bf16> b;
  for (float x : {0.0f, -1.5f, 65504.0f, 1e-7f, 3.14159f}) h.push_back(f16(x)), b.push_back(bf16(x * 1e30f));
  round_trip<f16, float>(h, DType::F32);
  round_trip<bf16, float>(b, DType::F32);
}

TEST(StorageConvert, ANarrowingThatChangesAValueIsAnErrorNamingTheElement) {
  const Tensor ids = Tensor::i64({2, 3}, std::vector<int64_t>{0, 1, 2, 5000000000, 4, 5});
  const std::string m = error_of([&] { plan::to_storage(ids, DType::I32, "input 'ids'"); });
  EXPECT_THAT(m, HasSubstr("input 'ids'"));
  EXPECT_THAT(m, HasSubstr("element 3 (at [1, 0]) is 5000000000"));
  EXPECT_THAT(m, HasSubstr("i32"));
  EXPECT_THAT(m, HasSubstr("range [-2147483648, 2147483647]"));
  const Tensor neg = Tensor::i64({1}, std::vector<int64_t>{-3000000000});
  EXPECT_THAT(error_of([&] { plan::to_storage(neg, DType::I32, "param 'w'"); }), HasSubstr("param 'w'"));

  // Read back: a u32 word that does not fit u8.
  const std::vector<uint32_t> words{1, 300};
  const std::string r = error_of([&] {
    plan::from_storage({reinterpret_cast<const uint8_t*>(words.data()), 8}, DType::U32, DType::U8, {2}, "output 'y'");
  });
  EXPECT_THAT(r, HasSubstr("output 'y': element 1 (at [1]) is 300"));
  EXPECT_THAT(r, HasSubstr("read back"));

  // Floats: an overflow to infinity is an error; infinities and NaN themselves pass.
  const Tensor big = Tensor::f64({2}, std::vector<double>{1.0, 1e300});
  EXPECT_THAT(error_of([&] { plan::to_storage(big, DType::F32, "input 'x'"); }), HasSubstr("element 1"));
  const Tensor inf = Tensor::f32({2}, std::vector<float>{INFINITY, 70000.0f});
  EXPECT_THAT(error_of([&] { plan::to_storage(inf, DType::F16, "input 'x'"); }), HasSubstr("element 1 (at [1]) is 70000"));
  const Tensor ok = Tensor::f32({1}, std::vector<float>{INFINITY});
  EXPECT_NO_THROW(plan::to_storage(ok, DType::F16, "input 'x'"));

  // No float <-> integer storage, and the sizes must match.
  EXPECT_THAT(error_of([&] { plan::to_storage(ok, DType::I32, "input 'x'"); }), HasSubstr("no storage conversion"));
  std::vector<uint8_t> small(3);
  EXPECT_THROW(plan::to_storage(ok, DType::F32, small, "input 'x'"), Error);
  EXPECT_THROW(plan::from_storage(small, DType::F32, DType::F32, {1}, "output 0"), Error);
}

}  // namespace
}  // namespace rlx
