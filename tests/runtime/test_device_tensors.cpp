// Device tensors (Tensor::borrow_device / adopt_device) without a GPU: what they refuse on the
// host side (host accessors, graphs compiled for another device, device outputs of a backend
// that returns host tensors only, params), and what they are (metadata, ownership). The CUDA
// data path is in tests/cuda/test_cuda_device_tensors.cpp.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "rlx/rlx.h"

namespace {

using namespace rlx;

// A device pointer that is never dereferenced (the host-side checks come first).
void* fake_device_ptr() { return reinterpret_cast<void*>(uintptr_t{0x7f0000001000}); }

Tensor fake_cuda_tensor(std::vector<int64_t> shape = {2, 3}) {
  return Tensor::borrow_device(Device::Cuda, 0, DType::F32, std::move(shape), fake_device_ptr());
}

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no rlx::Error)";
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

TEST(DeviceTensor, CarriesDeviceMetadata) {
  const Tensor t = Tensor::borrow_device(Device::Cuda, 1, DType::F16, {4, 5}, fake_device_ptr(), Tensor::kCudaLegacyStream);
  EXPECT_TRUE(t.is_device());
  EXPECT_EQ(t.device(), Device::Cuda);
  EXPECT_EQ(t.device_ordinal(), 1);
  EXPECT_EQ(t.device_data(), fake_device_ptr());
  EXPECT_EQ(t.stream(), std::optional<uintptr_t>(Tensor::kCudaLegacyStream));
  EXPECT_EQ(t.nbytes(), 40u);
  EXPECT_TRUE(t.is_borrowed());
  EXPECT_EQ(t.summary(), "f16[4,5] on cuda:1");
  const Tensor r = t.reshaped({20});
  EXPECT_TRUE(r.is_device());
  EXPECT_EQ(r.device_data(), fake_device_ptr());
  const Tensor host = Tensor::f32({2}, std::vector<float>{1, 2});
  EXPECT_FALSE(host.is_device());
  EXPECT_EQ(host.device(), Device::Cpu);
  EXPECT_FALSE(host.stream());
}

TEST(DeviceTensor, HostAccessorsAreClearErrors) {
  Tensor t = fake_cuda_tensor();
  const Tensor& c = t;
  for (const auto& [what, fn] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"raw", [&] { (void)t.raw(); }},
           {"raw", [&] { (void)c.raw(); }},
           {"data", [&] { (void)t.data<float>(); }},
           {"data", [&] { (void)c.data<float>(); }},
           {"cast", [&] { (void)c.cast(DType::F16); }},
           {"clone", [&] { (void)c.clone(); }},
           {"to_f32", [&] { (void)c.to_f32(); }},
           {"to_f64", [&] { (void)c.to_f64(); }},
           {"to_i64", [&] { (void)c.to_i64(); }}}) {
    const std::string msg = error_of(fn);
    expect_contains(msg, "Tensor::" + what + ": the tensor f32[2,3] is in cuda memory (device 0)");
    expect_contains(msg, "to_host()");
  }
  expect_contains(error_of([] { (void)Tensor::f32({1}, std::vector<float>{1}).device_data(); }), "is in host memory");
  expect_contains(error_of([] { Tensor::f32({1}, std::vector<float>{1}).ready_on(Tensor::kCudaLegacyStream); }),
                  "is in host memory");
}

TEST(DeviceTensor, BadBorrowsAreClearErrors) {
  expect_contains(error_of([] { Tensor::borrow_device(Device::Vulkan, 0, DType::F32, {2}, fake_device_ptr()); }),
                  "rlx takes device memory of CUDA only");
  expect_contains(error_of([] { Tensor::borrow_device(Device::Cpu, 0, DType::F32, {2}, fake_device_ptr()); }),
                  "rlx takes device memory of CUDA only");
  expect_contains(error_of([] { Tensor::borrow_device(Device::Cuda, -1, DType::F32, {2}, fake_device_ptr()); }),
                  "negative device ordinal");
  expect_contains(error_of([] { Tensor::borrow_device(Device::Cuda, 0, DType::F32, {2}, nullptr); }),
                  "null device pointer");
  expect_contains(error_of([] { Tensor::borrow_device(Device::Cuda, 0, DType::F32, {2}, fake_device_ptr(), 0); }),
                  "stream 0 is ambiguous");
  expect_contains(error_of([] { Tensor::adopt_device(Device::Cuda, 0, DType::F32, {2}, fake_device_ptr(), nullptr); }),
                  "no owner given");
  // An empty tensor may have no pointer.
  EXPECT_EQ(Tensor::borrow_device(Device::Cuda, 0, DType::F32, {0, 3}, nullptr).numel(), 0);
}

TEST(DeviceTensor, AdoptedMemoryIsReleasedWithTheLastCopy) {
  bool released = false;
  {
    std::shared_ptr<void> owner(fake_device_ptr(), [&](void*) { released = true; });
    Tensor a = Tensor::adopt_device(Device::Cuda, 0, DType::I32, {3}, fake_device_ptr(), std::move(owner));
    EXPECT_FALSE(a.is_borrowed());
    Tensor b = a.reshaped({1, 3});
    a = Tensor();
    EXPECT_FALSE(released) << "a copy still refers to it";
    EXPECT_EQ(b.device_data(), fake_device_ptr());
  }
  EXPECT_TRUE(released);
}

Graph add_one() {
  Graph g;
  const Value x = g.input("x", Shape::of({2, 3}));
  const Value w = g.param("w", Shape::of({2, 3}));
  g.add_output(g.add(x, w), "y");
  return g;
}

TEST(DeviceTensor, CpuGraphRefusesDeviceInputsAndOutputs) {
  auto cg = Session(Device::Cpu).compile(add_one());
  cg.set_param("w", Tensor::f32({2, 3}, std::vector<float>(6, 1.0f)));
  const std::string in = error_of([&] { cg.run({{"x", fake_cuda_tensor()}}); });
  expect_contains(in, "input 'x' is in cuda memory (device 0) but this graph was compiled for cpu");
  expect_contains(in, "Tensor::to_host");
  const Tensor x = Tensor::f32({2, 3}, std::vector<float>(6, 2.0f));
  RunOptions dev_out;
  dev_out.device_outputs = true;
  expect_contains(error_of([&] { cg.run({{"x", x}}, {0}, dev_out); }),
                  "device outputs were asked for, but this graph was compiled for cpu");
  RunOptions into;
  into.out = {fake_cuda_tensor()};
  expect_contains(error_of([&] { cg.run({{"x", x}}, {0}, into); }), "device outputs were asked for");
  expect_contains(error_of([&] { cg.set_param("w", fake_cuda_tensor()); }),
                  "set_param('w'): the value is in cuda memory; params are copied from host tensors");
  // The graph still runs on host tensors after the refusals.
  EXPECT_EQ(cg.run({{"x", x}})[0].to_f32(), std::vector<float>(6, 3.0f));
}

TEST(DeviceTensor, ToHostWithoutDeviceIsAClearError) {
  const std::string reason = rlx::testing::cuda_unavailable_reason();
  if (reason.empty()) GTEST_SKIP() << "a CUDA device is present (tests/cuda/test_cuda_device_tensors.cpp covers to_host)";
  const std::string msg = error_of([] { (void)fake_cuda_tensor().to_host(); });
#ifdef RLX_HAVE_CUDA
  expect_contains(msg, "no CUDA device: ");
#else
  expect_contains(msg, "this build of rlx has no CUDA backend");
#endif
}

}  // namespace
