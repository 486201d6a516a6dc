#pragma once
// cuBLASLt and NVRTC, loaded at run time (dlopen) on first CUDA use, so that a process that never
// touches CUDA (every CPU run, `rlx --help`) never maps them (about 650 MB of files in CUDA 13).
// Only the headers are used at build time, for the types; the functions rlx calls are resolved
// into one table per library. cuDNN has its own loader (cudnn_lib.h); the driver (libcuda) is
// loaded by the static CUDA runtime (device.h).
//
// Which file: the knob cublaslt_lib / nvrtc_lib (RLX_CUBLASLT_LIB, RLX_NVRTC_LIB: a file name
// or a path), else the soname of the headers' major version (libcublasLt.so.13,
// libnvrtc.so.13). A name without '/' is looked for on the dynamic loader's path
// (LD_LIBRARY_PATH, the ld.so cache, the default folders), then in the folder of the toolkit
// rlx was built with (RLX_CUDA_LIBRARY_DIR, set by CMake).
#include <cublasLt.h>
#include <nvrtc.h>

#include <string>

namespace rlx::cuda {

// Every cuBLASLt / NVRTC function rlx calls (add a row when the backend calls a new one).
#define RLX_CUBLASLT_FUNCTIONS(X)                                                                         \
  X(cublasLtGetVersion) X(cublasLtGetStatusName) X(cublasLtGetStatusString) X(cublasLtCreate)             \
  X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)              \
  X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute)        \
  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                                    \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

#define RLX_NVRTC_FUNCTIONS(X)                                                                            \
  X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcCreateProgram) X(nvrtcDestroyProgram)                     \
  X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog) X(nvrtcGetCUBINSize)             \
  X(nvrtcGetCUBIN)

// The resolved entry points (members named like the library's functions).
struct CublasLtApi {
#define RLX_CUDA_LIB_MEMBER(fn) decltype(&::fn) fn = nullptr;
  RLX_CUBLASLT_FUNCTIONS(RLX_CUDA_LIB_MEMBER)
};
struct NvrtcApi {
  RLX_NVRTC_FUNCTIONS(RLX_CUDA_LIB_MEMBER)
#undef RLX_CUDA_LIB_MEMBER
};

// The file that is tried now: the knob's value, else the soname (see above).
std::string cublaslt_library_name();
std::string nvrtc_library_name();

// Empty when the library named now loads and has every function above at the headers' major
// version; else why, where it was looked for and what to do. Loads it (once per distinct name;
// never unloaded).
std::string cublaslt_unavailable_reason();
std::string nvrtc_unavailable_reason();

// The process's library: bound by the first call that succeeds (with the name read then), the
// same table afterwards (a cuBLASLt handle belongs to the library that created it). Throws
// rlx::Error(reason) while it cannot be loaded. The device probe (device()) binds both, so a
// missing library is reported when the CUDA device is created; NVRTC alone (nvrtc_compile)
// needs no device.
const CublasLtApi& cublaslt();
const NvrtcApi& nvrtc();

}  // namespace rlx::cuda
