// CUDA runtime behaviour: the missing-device error, CUDA graph capture/replay (counted), param
// re-upload after set_param, out-of-memory errors with the bytes, and the NVRTC disk cache.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "cuda/cuda_test_util.h"
#ifdef RLX_HAVE_CUDA
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/stats.h"
#endif

namespace {

using namespace rlx;

TEST(CudaRuntime, CompileWithoutDeviceIsAClearError) {
  const std::string reason = rlx::testing::cuda_unavailable_reason();
  if (reason.empty()) GTEST_SKIP() << "a CUDA device is present: the missing-device error cannot be observed";
#ifdef RLX_HAVE_CUDA
  EXPECT_EQ(reason.rfind("no CUDA device: ", 0), 0u) << reason;
#else
  EXPECT_NE(reason.find("not available in this build"), std::string::npos) << reason;
#endif
}

#ifdef RLX_HAVE_CUDA
Graph small_graph() {
  Graph g;
  const Value x = g.input("x", Shape::of({8, 64}));
  const Value w = g.param("w", Shape::of({64, 32}));
  g.add_output(g.softmax(g.gelu(g.matmul(x, w))));
  return g;
}

TEST(CudaRuntime, GraphIsCapturedOnceAndReplayed) {
  RLX_REQUIRE_CUDA();
  if (const char* e = std::getenv("RLX_CUDA_GRAPHS"); e && std::string(e) == "0") GTEST_SKIP() << "RLX_CUDA_GRAPHS=0";
  auto cg = Session(Device::Cuda).compile(small_graph());
  cg.set_param("w", rlx::testing::random_tensor(DType::F32, {64, 32}, 3));
  const Tensor x = rlx::testing::random_tensor(DType::F32, {8, 64}, 4);
  const auto before = cuda::run_stats();
  const Tensor r1 = cg.run({{"x", x}})[0];
  const Tensor r2 = cg.run({{"x", x}})[0];
  const Tensor r3 = cg.run({{"x", x}})[0];
  const auto after = cuda::run_stats();
  EXPECT_EQ(after.graph_captures - before.graph_captures, 1u);
  EXPECT_EQ(after.graph_replays - before.graph_replays, 2u);
  EXPECT_EQ(std::memcmp(r1.raw(), r2.raw(), r1.nbytes()), 0);
  EXPECT_EQ(std::memcmp(r1.raw(), r3.raw(), r1.nbytes()), 0);
  // A replay reads the new input bytes.
  const Tensor x2 = rlx::testing::random_tensor(DType::F32, {8, 64}, 5);
  const Tensor r4 = cg.run({{"x", x2}})[0];
  auto cpu = Session(Device::Cpu).compile(small_graph());
  cpu.set_param("w", rlx::testing::random_tensor(DType::F32, {64, 32}, 3));
  EXPECT_TRUE(rlx::testing::all_close(r4, {8, 32}, rlx::testing::to_doubles(cpu.run({{"x", x2}})[0]),
                                      rlx::testing::parity_tolerance(DType::F32)));
}

TEST(CudaRuntime, SetParamIsUploadedBeforeTheNextRun) {
  RLX_REQUIRE_CUDA();
  auto cg = Session(Device::Cuda).compile(small_graph());
  auto cpu = Session(Device::Cpu).compile(small_graph());
  const Tensor x = rlx::testing::random_tensor(DType::F32, {8, 64}, 4);
  for (uint64_t seed : {21u, 22u}) {
    const Tensor w = rlx::testing::random_tensor(DType::F32, {64, 32}, seed);
    cg.set_param("w", w);
    cpu.set_param("w", w);
    const auto uploads = cuda::run_stats().param_uploads;
    const Tensor got = cg.run({{"x", x}})[0];
    EXPECT_EQ(cuda::run_stats().param_uploads, uploads + 1);
    cg.run({{"x", x}});  // unchanged params are not uploaded again
    EXPECT_EQ(cuda::run_stats().param_uploads, uploads + 1);
    EXPECT_TRUE(rlx::testing::all_close(got, {8, 32}, rlx::testing::to_doubles(cpu.run({{"x", x}})[0]),
                                        rlx::testing::parity_tolerance(DType::F32)));
  }
}

TEST(CudaRuntime, OutOfMemoryNamesTheBytes) {
  RLX_REQUIRE_CUDA();
  // A 4 TiB intermediate: above the default size policy (1 TiB per tensor), so the policy is
  // raised for the build and the compile to reach the device allocator.
  Limits big;
  big.max_tensor_bytes = int64_t(1) << 50;
  big.max_tensor_elements = int64_t(1) << 50;
  ScopedLimits scoped(big);
  Graph g;
  const Value x = g.input("x", Shape::of({int64_t(1) << 20}));
  g.add_output(g.expand(g.reshape(x, {1, int64_t(1) << 20}), {int64_t(1) << 20, int64_t(1) << 20}));
  CompileOptions options;
  options.limits = big;
  const std::string msg = rlx::testing::error_message([&] { Session(Device::Cuda).compile(g, options); });
  EXPECT_NE(msg.find("out of memory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4398046511104"), std::string::npos) << msg;
}

TEST(CudaRuntime, KernelsAreCachedOnDisk) {
  RLX_REQUIRE_CUDA();
  const auto dir = std::filesystem::temp_directory_path() / ("rlx_cuda_cache_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const char* old = std::getenv("RLX_CACHE_DIR");
  const std::string saved = old ? old : "";
  ::setenv("RLX_CACHE_DIR", dir.c_str(), 1);
  const std::string src = "extern \"C\" __global__ void cache_probe(int* p) { p[threadIdx.x] = 7; }\n// " + dir.string();
  const auto s0 = cuda::kernel_cache_stats();
  cuda::get_kernel("cache_probe", src);
  const auto s1 = cuda::kernel_cache_stats();
  EXPECT_EQ(s1.compiled, s0.compiled + 1);
  cuda::get_kernel("cache_probe", src);
  EXPECT_EQ(cuda::kernel_cache_stats().compiled, s1.compiled);  // in memory
  cuda::kernel_cache_forget_memory();
  cuda::get_kernel("cache_probe", src);
  const auto s2 = cuda::kernel_cache_stats();
  EXPECT_EQ(s2.compiled, s1.compiled);  // not recompiled: loaded from disk
  EXPECT_EQ(s2.disk_hits, s1.disk_hits + 1);
  bool found = false;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) found |= e.path().extension() == ".cubin";
  EXPECT_TRUE(found);
  if (old) ::setenv("RLX_CACHE_DIR", saved.c_str(), 1);
  else ::unsetenv("RLX_CACHE_DIR");
  std::filesystem::remove_all(dir);
}
#endif  // RLX_HAVE_CUDA

}  // namespace
