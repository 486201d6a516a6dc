// Device tensors on the CUDA backend: inputs read from device memory and outputs returned in
// device memory (rlx-owned or the caller's) with no host <-> device copy of the data
// (rlx::device_stats counts every one), the producer stream waited for, to_host, and the
// device-side checks (pointer kind, ordinal, output dtype/shape). Skipped without a CUDA device.
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "runtime/device_api.h"
#ifdef RLX_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backends/cuda/device.h"
#endif

namespace {

using namespace rlx;

#ifdef RLX_HAVE_CUDA

Graph two_outputs() {
  Graph g;
  const Value x = g.input("x", Shape::of({8, 64}));
  const Value w = g.param("w", Shape::of({64, 32}));
  const Value h = g.gelu(g.matmul(x, w));
  g.add_output(h, "h");
  g.add_output(g.softmax(h), "p");
  return g;
}

// Device memory holding `t`'s bytes (uploaded here, outside rlx's counters).
struct DeviceCopy {
  cuda::DeviceBuffer buf;
  Tensor tensor;
  explicit DeviceCopy(const Tensor& t, std::optional<uintptr_t> stream = std::nullopt)
      : buf(t.nbytes(), "test tensor") {
    if (t.nbytes()) {
      EXPECT_EQ(cudaMemcpy(buf.data(), t.raw(), t.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
    }
    tensor = Tensor::borrow_device(Device::Cuda, cuda::device().ordinal, t.dtype(), t.shape(), buf.data(), stream);
  }
};

Tensor read_back(const Tensor& d) {
  Tensor h = Tensor::empty(d.dtype(), d.shape());
  if (h.nbytes()) {
    EXPECT_EQ(cudaMemcpy(h.raw(), d.device_data(), h.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return h;
}

void expect_same(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_TRUE(rlx::testing::all_close(got, want.shape(), rlx::testing::to_doubles(want),
                                      rlx::testing::parity_tolerance(want.dtype())));
}

struct Fixture {
  CompiledGraph cg = Session(Device::Cuda).compile(two_outputs());
  Tensor x = rlx::testing::random_tensor(DType::F32, {8, 64}, 11);
  std::vector<Tensor> host_result;
  Fixture() {
    cg.set_param("w", rlx::testing::random_tensor(DType::F32, {64, 32}, 12));
    host_result = cg.run({{"x", x}});  // uploads the params once; the reference result
  }
};

TEST(CudaDeviceTensors, DeviceInputsAndOutputsMoveNoBytesThroughTheHost) {
  RLX_REQUIRE_CUDA();
  Fixture f;
  DeviceCopy dx(f.x);
  RunOptions opts;
  opts.device_outputs = true;
  const DeviceStats before = device_stats();
  const std::vector<Tensor> got = f.cg.run({{"x", dx.tensor}}, {0, 1}, opts);
  const DeviceStats after = device_stats();
  EXPECT_EQ(after.upload_bytes - before.upload_bytes, 0u) << "an input or param went host -> device";
  EXPECT_EQ(after.download_bytes - before.download_bytes, 0u) << "an output went device -> host";
  EXPECT_EQ(after.device_copy_bytes - before.device_copy_bytes, f.x.nbytes() + 2 * 8 * 32 * sizeof(float))
      << "the input and both outputs are device-to-device copies";
  ASSERT_EQ(got.size(), 2u);
  for (const Tensor& t : got) {
    EXPECT_TRUE(t.is_device());
    EXPECT_EQ(t.device(), Device::Cuda);
    EXPECT_EQ(t.device_ordinal(), cuda::device().ordinal);
    EXPECT_FALSE(t.is_borrowed()) << "rlx owns the output's memory";
    EXPECT_FALSE(t.stream()) << "run() returns finished outputs";
  }
  expect_same(read_back(got[0]), f.host_result[0]);
  expect_same(read_back(got[1]), f.host_result[1]);
  // to_host is the explicit copy, and it is counted.
  const DeviceStats pre = device_stats();
  expect_same(got[1].to_host(), f.host_result[1]);
  EXPECT_EQ(device_stats().download_bytes - pre.download_bytes, got[1].nbytes());
  // A host input with device outputs, and a device input with host outputs, mix freely.
  expect_same(read_back(f.cg.run({{"x", f.x}}, {0}, opts)[0]), f.host_result[0]);
  expect_same(f.cg.run({{"x", dx.tensor}})[1], f.host_result[1]);
}

TEST(CudaDeviceTensors, OutputsGoIntoCallerBuffers) {
  RLX_REQUIRE_CUDA();
  Fixture f;
  DeviceCopy dx(f.x);
  DeviceCopy p(Tensor::zeros(DType::F32, {8, 32})), h(Tensor::zeros(DType::F32, {8, 32}));
  RunOptions opts;
  opts.out = {p.tensor, h.tensor};  // outputs 1 then 0
  const DeviceStats before = device_stats();
  const std::vector<Tensor> got = f.cg.run({{"x", dx.tensor}}, {1, 0}, opts);
  EXPECT_EQ(device_stats().upload_bytes - before.upload_bytes, 0u);
  EXPECT_EQ(device_stats().download_bytes - before.download_bytes, 0u);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].device_data(), p.buf.data());
  EXPECT_EQ(got[1].device_data(), h.buf.data());
  expect_same(read_back(p.tensor), f.host_result[1]);
  expect_same(read_back(h.tensor), f.host_result[0]);
}

// The input is written on a stream of the caller's, behind a long memset: the run must wait for
// that stream (Tensor::stream), else it reads the zeros written before.
TEST(CudaDeviceTensors, RunWaitsForTheProducerStream) {
  RLX_REQUIRE_CUDA();
  Fixture f;
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cuda::DeviceBuffer slow(size_t(1) << 30, "test: a long memset");
  cuda::DeviceBuffer xbuf(f.x.nbytes(), "test: x");
  cuda::PinnedBuffer staged;
  staged.reserve(f.x.nbytes());
  std::memcpy(staged.data(), f.x.raw(), f.x.nbytes());
  RunOptions opts;
  opts.device_outputs = true;
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(cudaMemset(xbuf.data(), 0, xbuf.size()), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // zeros before the side stream's work (it does not wait for them)
    for (int i = 0; i < 4; ++i) ASSERT_EQ(cudaMemsetAsync(slow.data(), i, slow.size(), s), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(xbuf.data(), staged.data(), f.x.nbytes(), cudaMemcpyHostToDevice, s), cudaSuccess);
    const Tensor dx = Tensor::borrow_device(Device::Cuda, cuda::device().ordinal, DType::F32, {8, 64}, xbuf.data(),
                                            reinterpret_cast<uintptr_t>(s));
    expect_same(read_back(f.cg.run({{"x", dx}}, {0}, opts)[0]), f.host_result[0]);
  }
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaStreamDestroy(s);
}

TEST(CudaDeviceTensors, DeviceSideMistakesAreClearErrors) {
  RLX_REQUIRE_CUDA();
  Fixture f;
  auto error_of = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no rlx::Error)";
  };
  // Host memory passed off as device memory.
  std::vector<float> host(8 * 64, 1.0f);
  const Tensor fake = Tensor::borrow_device(Device::Cuda, cuda::device().ordinal, DType::F32, {8, 64}, host.data());
  const std::string not_device = error_of([&] { f.cg.run({{"x", fake}}); });
  EXPECT_NE(not_device.find("input 'x': its pointer is not CUDA device memory"), std::string::npos) << not_device;
  // Another ordinal than the one rlx runs on.
  DeviceCopy dx(f.x);
  const Tensor other = Tensor::borrow_device(Device::Cuda, cuda::device().ordinal + 7, DType::F32, {8, 64}, dx.buf.data());
  const std::string ordinal = error_of([&] { f.cg.run({{"x", other}}); });
  EXPECT_NE(ordinal.find("input 'x' is in the memory of cuda device"), std::string::npos) << ordinal;
  // A caller buffer of the wrong shape, and a host tensor as a destination.
  DeviceCopy small(Tensor::zeros(DType::F32, {8, 31}));
  RunOptions bad;
  bad.out = {small.tensor};
  const std::string shape = error_of([&] { f.cg.run({{"x", dx.tensor}}, {0}, bad); });
  EXPECT_NE(shape.find("RunOptions::out[0] (for output 0) is f32[8,31], the output is f32[8,32]"), std::string::npos)
      << shape;
  bad.out = {Tensor::zeros(DType::F32, {8, 32})};
  const std::string host_out = error_of([&] { f.cg.run({{"x", dx.tensor}}, {0}, bad); });
  EXPECT_NE(host_out.find("RunOptions::out[0] is in host memory"), std::string::npos) << host_out;
  // The graph still runs after the refusals.
  expect_same(f.cg.run({{"x", dx.tensor}})[0], f.host_result[0]);
}

#endif  // RLX_HAVE_CUDA

}  // namespace
