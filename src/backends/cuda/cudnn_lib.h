#pragma once
// cuDNN, loaded lazily: the first use dlopen's libcudnn.so.<major of the header> (or the file
// named by RLX_CUDNN_LIB) and resolves only the functions rlx calls, so a binary built with the
// cuDNN header starts, and runs every other op, on machines without cuDNN. Compiled with the
// header only in the cudnn_*.cpp sources (CMake defines RLX_HAVE_CUDNN for them).
#include <memory>
#include <string>

namespace rlx::cuda {

// Empty when cuDNN can be used in this process; else "cuDNN not found: <why>" (built without
// the header, library missing, a function missing, wrong major version). The library named by
// RLX_CUDNN_LIB (read on every call) is loaded once per distinct name.
std::string cudnn_unavailable_reason();

// The library file that is tried: $RLX_CUDNN_LIB, else libcudnn.so.<major>.
std::string cudnn_library_name();

}  // namespace rlx::cuda

#ifdef RLX_HAVE_CUDNN
#include <cudnn.h>

#include <cstddef>
#include <cstdint>

namespace rlx::cuda {

#define RLX_CUDNN_FUNCTIONS(X)                                                                          \
  X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream)            \
  X(cudnnCreateTensorDescriptor) X(cudnnSetTensorNdDescriptor) X(cudnnDestroyTensorDescriptor)          \
  X(cudnnCreateFilterDescriptor) X(cudnnSetFilterNdDescriptor) X(cudnnDestroyFilterDescriptor)          \
  X(cudnnCreateConvolutionDescriptor) X(cudnnSetConvolutionNdDescriptor)                                \
  X(cudnnSetConvolutionGroupCount) X(cudnnSetConvolutionMathType) X(cudnnDestroyConvolutionDescriptor)  \
  X(cudnnGetConvolutionNdForwardOutputDim) X(cudnnGetConvolutionForwardAlgorithm_v7)                    \
  X(cudnnGetConvolutionForwardWorkspaceSize) X(cudnnConvolutionForward)                                 \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7) X(cudnnGetConvolutionBackwardDataWorkspaceSize)        \
  X(cudnnConvolutionBackwardData) X(cudnnCreatePoolingDescriptor) X(cudnnSetPoolingNdDescriptor)        \
  X(cudnnGetPoolingNdForwardOutputDim) X(cudnnPoolingForward) X(cudnnDestroyPoolingDescriptor)

// The resolved entry points (members named like the cuDNN functions).
struct CudnnApi {
#define RLX_CUDNN_MEMBER(fn) decltype(&::fn) fn = nullptr;
  RLX_CUDNN_FUNCTIONS(RLX_CUDNN_MEMBER)
#undef RLX_CUDNN_MEMBER
};

// The library named now (cudnn_library_name()); throws rlx::Error(cudnn_unavailable_reason())
// when it cannot be used. The reference stays valid for the whole process: steps keep it, so
// a later change of RLX_CUDNN_LIB does not affect compiled graphs.
const CudnnApi& cudnn();

// A failed status -> rlx::Error "<what>: <call> failed: <status name> (status <n>)".
void check_cudnn(const CudnnApi& api, cudnnStatus_t s, const char* call, const std::string& what);
#define RLX_CUDNN_CHECK(api, expr, what) ::rlx::cuda::check_cudnn((api), (api).expr, #expr, (what))

// An owned cuDNN handle (on the current device).
class CudnnHandle {
 public:
  explicit CudnnHandle(const CudnnApi& api);
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;
  ~CudnnHandle();
  cudnnHandle_t get() const { return h_; }

 private:
  const CudnnApi& api_;
  cudnnHandle_t h_ = nullptr;
};

// What the cuDNN steps of one compiled variant share: one handle (a variant issues its work on
// one stream, in order, and each step sets the handle's stream before its call) and one
// workspace, grown at lowering time to the largest step's need (steps read the pointer when
// they run, so all of them see the final one).
struct CudnnShared {
  explicit CudnnShared(const CudnnApi& a) : api(a), handle(a) {}
  const CudnnApi& api;
  CudnnHandle handle;
  uint8_t* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// The shared state of the variant whose lowering context is `owner`: created on first use
// (with cudnn()), destroyed with the last step that holds it.
std::shared_ptr<CudnnShared> cudnn_shared_for(const void* owner);

}  // namespace rlx::cuda
#endif  // RLX_HAVE_CUDNN
