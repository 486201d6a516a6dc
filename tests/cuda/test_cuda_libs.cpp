// The CUDA libraries are loaded on first CUDA use (src/backends/cuda/cuda_libs.h): a CPU-only
// process (the rlx CLI's help, export and a CPU run) never maps cuBLASLt, NVRTC, cuDNN or the
// driver, and a missing library is a clear rlx::Error naming the file, where it was looked for
// and what to do. Everything but the last test runs without a GPU.
#include <gtest/gtest.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "support/test_util.h"
#ifdef RLX_HAVE_CUDA
#include "backends/cuda/cuda_libs.h"
#endif

extern char** environ;

namespace rlx {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// One run of the rlx CLI, observed when it exits.
struct Traced {
  bool ptrace_denied = false;
  int code = -1;           // exit status (-1: killed by a signal)
  std::string maps;        // /proc/<pid>/maps at its exit (after every static destructor)
  std::string peak_rss;    // VmHWM of /proc/<pid>/status then
  std::string out, err;
};

// Runs `rlx ARGS...` under ptrace with PTRACE_O_TRACEEXIT: the process stops at its exit, with
// its address space still whole, and its maps are read then.
Traced run_traced(const std::vector<std::string>& args, const fs::path& dir) {
  Traced t;
  const std::string out = (dir / "stdout.txt").string(), err = (dir / "stderr.txt").string();
  std::vector<std::string> argv_s = {rlx::testing::cli_path()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  // LeakSanitizer attaches to the threads with ptrace at exit, which a traced process refuses.
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "ASAN_OPTIONS=", 13) != 0) env_s.emplace_back(*e);
  const char* asan = std::getenv("ASAN_OPTIONS");
  env_s.push_back(std::string("ASAN_OPTIONS=") + (asan ? std::string(asan) + ":" : "") + "detect_leaks=0");
  std::vector<char*> envp;
  for (std::string& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  const pid_t pid = fork();
  if (pid == 0) {  // only async-signal-safe calls until exec
    const int fo = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int fe = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0) _exit(125);
    if (ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) != 0) _exit(126);
    raise(SIGSTOP);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  EXPECT_GT(pid, 0) << "fork failed: " << std::strerror(errno);
  if (pid <= 0) return t;
  int st = 0;
  waitpid(pid, &st, 0);
  if (WIFEXITED(st)) {
    t.ptrace_denied = WEXITSTATUS(st) == 126;
    t.code = WEXITSTATUS(st);
    return t;
  }
  ptrace(PTRACE_SETOPTIONS, pid, nullptr, reinterpret_cast<void*>(PTRACE_O_TRACEEXIT | PTRACE_O_EXITKILL));
  ptrace(PTRACE_CONT, pid, nullptr, nullptr);
  for (;;) {
    if (waitpid(pid, &st, 0) < 0) break;
    if (WIFEXITED(st)) {
      t.code = WEXITSTATUS(st);
      break;
    }
    if (WIFSIGNALED(st)) break;
    if (!WIFSTOPPED(st)) continue;
    int sig = WSTOPSIG(st);
    if ((st >> 8) == (SIGTRAP | (PTRACE_EVENT_EXIT << 8))) {
      const std::string proc = "/proc/" + std::to_string(pid);
      t.maps = read_text(proc + "/maps");
      std::istringstream status(read_text(proc + "/status"));
      for (std::string line; std::getline(status, line);)
        if (line.rfind("VmHWM:", 0) == 0) t.peak_rss = line.substr(6);
      sig = 0;
    } else if (sig == SIGTRAP) {
      sig = 0;  // the stop after execve
    }
    ptrace(PTRACE_CONT, pid, nullptr, reinterpret_cast<void*>(static_cast<intptr_t>(sig)));
  }
  t.out = read_text(out);
  t.err = read_text(err);
  return t;
}

// The mapped files of a maps text whose name contains one of the CUDA libraries.
std::vector<std::string> cuda_libraries_in(const std::string& maps) {
  std::vector<std::string> found;
  std::istringstream in(maps);
  for (std::string line; std::getline(in, line);) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string file = line.substr(slash);
    const std::string base = fs::path(file).filename().string();
    for (const char* lib : {"libcublas", "libnvrtc", "libcudnn", "libcuda.so", "libcudart.so"})
      if (base.rfind(lib, 0) == 0 && (found.empty() || found.back() != file)) found.push_back(file);
  }
  return found;
}

class CudaLibraries : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() / ("rlx_cuda_libs_test_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(counter++));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

TEST_F(CudaLibraries, CpuProcessesNeverMapThem) {
  const std::string model = (dir_ / "small.json").string();
  const std::vector<std::vector<std::string>> runs = {
      {"--help"},
      {"export-demo", model, "--seq", "8", "--hidden", "32", "--heads", "4", "--kv-heads", "2"},
      {"run", model, "--random-inputs", "--repeat", "2", "--threads", "1"},
      {"run", model, "--random-inputs", "--repeat", "2"},  // every core: the BLAS's threads too
  };
  for (const auto& args : runs) {
    SCOPED_TRACE("rlx " + args[0]);
    const Traced t = run_traced(args, dir_);
    if (t.ptrace_denied) GTEST_SKIP() << "ptrace is not permitted here: the child's maps cannot be read at its exit";
    ASSERT_EQ(t.code, 0) << "stdout:\n" << t.out << "\nstderr:\n" << t.err;
    ASSERT_FALSE(t.maps.empty()) << "the exit stop was not observed";
    const std::vector<std::string> mapped = cuda_libraries_in(t.maps);
    EXPECT_TRUE(mapped.empty()) << "a CPU-only rlx process mapped " << ::testing::PrintToString(mapped);
    std::printf("rlx %s: peak resident %s\n", args[0].c_str(), t.peak_rss.c_str());
  }
}

#ifdef RLX_HAVE_CUDA
using rlx::testing::ScopedEnv;

// Runs without a GPU: each loader reports a missing file with the file, where it was looked for
// and the variable that names another, and never maps the real library for that name.
TEST_F(CudaLibraries, MissingLibraryIsAClearError) {
  {
    const ScopedEnv env("RLX_CUBLASLT_LIB", "/nonexistent/rlx-test/libcublasLt.so.13");
    EXPECT_EQ(cuda::cublaslt_library_name(), "/nonexistent/rlx-test/libcublasLt.so.13");
    const std::string why = cuda::cublaslt_unavailable_reason();
    EXPECT_EQ(why.rfind("cuBLASLt could not be loaded: /nonexistent/rlx-test/libcublasLt.so.13 was looked for at "
                        "/nonexistent/rlx-test/libcublasLt.so.13", 0),
              0u)
        << why;
    EXPECT_NE(why.find("RLX_CUBLASLT_LIB"), std::string::npos) << why;
    EXPECT_NE(why.find("No such file"), std::string::npos) << "the loader's own reason is kept: " << why;
  }
  {
    const ScopedEnv env("RLX_NVRTC_LIB", "librlx-test-no-such-nvrtc.so.13");
    EXPECT_EQ(cuda::nvrtc_library_name(), "librlx-test-no-such-nvrtc.so.13");
    const std::string why = cuda::nvrtc_unavailable_reason();
    EXPECT_EQ(why.rfind("NVRTC could not be loaded: librlx-test-no-such-nvrtc.so.13 was looked for on the dynamic "
                        "loader's path (LD_LIBRARY_PATH",
                        0),
              0u)
        << why;
    EXPECT_NE(why.find("(the CUDA toolkit rlx was built with)"), std::string::npos) << why;
    EXPECT_NE(why.find("; install the CUDA 13 NVRTC library (the toolkit's, or the nvidia-cuda-nvrtc pip wheel) and "
                       "add its folder to LD_LIBRARY_PATH"),
              std::string::npos)
        << why;
    EXPECT_NE(why.find("RLX_NVRTC_LIB"), std::string::npos) << why;
  }
  // A library that is not the one asked for: its missing functions are named.
  {
    const ScopedEnv env("RLX_NVRTC_LIB", "libz.so.1");
    const std::string why = cuda::nvrtc_unavailable_reason();
    EXPECT_EQ(why.rfind("NVRTC could not be used: libz.so.1 has no function nvrtcVersion", 0), 0u) << why;
  }
  EXPECT_EQ(cuda::cublaslt_library_name(), "libcublasLt.so.13");
  EXPECT_EQ(cuda::nvrtc_library_name(), "libnvrtc.so.13");
}

// Where the toolkit's libraries are installed (they are, wherever this was built, unless the
// binaries were moved), both load and have every function rlx calls at the headers' version.
TEST_F(CudaLibraries, TheToolkitsLibrariesLoad) {
  const std::string lt = cuda::cublaslt_unavailable_reason(), rtc = cuda::nvrtc_unavailable_reason();
  if (!lt.empty() || !rtc.empty()) GTEST_SKIP() << lt << "\n" << rtc;
  EXPECT_NE(cuda::nvrtc().nvrtcVersion, nullptr);
  EXPECT_NE(cuda::cublaslt().cublasLtMatmul, nullptr);
  EXPECT_STREQ(cuda::cublaslt().cublasLtGetStatusName(CUBLAS_STATUS_NOT_INITIALIZED), "CUBLAS_STATUS_NOT_INITIALIZED");
}

// With a GPU: creating the CUDA device fails with the library's reason (a fresh process, whose
// device probe runs with the variable set).
TEST_F(CudaLibraries, MissingLibraryFailsTheDevice) {
  RLX_REQUIRE_CUDA();
  const std::string model = (dir_ / "small.json").string();
  ASSERT_EQ(run_traced({"export-demo", model, "--seq", "8", "--hidden", "32", "--heads", "4", "--kv-heads", "2"}, dir_)
                .code,
            0);
  const ScopedEnv env("RLX_CUBLASLT_LIB", "/nonexistent/rlx-test/libcublasLt.so.13");
  const Traced t = run_traced({"run", model, "--random-inputs", "--repeat", "1", "--device", "cuda"}, dir_);
  if (t.ptrace_denied) GTEST_SKIP() << "ptrace is not permitted here";
  EXPECT_NE(t.code, 0);
  EXPECT_NE(t.err.find("no CUDA device: cuBLASLt could not be loaded: /nonexistent/rlx-test/libcublasLt.so.13"),
            std::string::npos)
      << t.err;
  EXPECT_NE(t.err.find("RLX_CUBLASLT_LIB"), std::string::npos) << t.err;
}
#endif

}  // namespace
}  // namespace rlx
