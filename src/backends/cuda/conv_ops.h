#pragma once
// Conv / ConvTranspose / Pool on CUDA through cuDNN: which attribute combinations cuDNN runs
// exactly (shared by the claims in conv_ops.cpp and the lowering in cudnn_conv.cpp), and the
// lowering entry point.
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/lower.h"
#include "rlx/ops.h"

namespace rlx::cuda {

// One op's sliding window in cuDNN's terms. cuDNN takes one pad per axis for both ends, so
// rlx's pads [begins..., ends...] become pad = begin: the windows then start where rlx's do,
// and the result is exact when cuDNN's window count equals rlx's output size (the end pad only
// decides how many windows there are). 1-d ops become 2-d with a leading spatial axis of 1.
struct CudnnWindow {
  // Spatial dims of the tensor the window slides over (ConvTranspose: its output, the "dx" of
  // cuDNN's backward-data convolution) and of the windowed result (ConvTranspose: its input).
  std::vector<int> in, out;
  std::vector<int> kernel, pad, stride, dilation;
};

// Plans for each op from its attributes and the spatial dims of its operands (x, the kernel,
// the output). False with `why` when cuDNN cannot run the op exactly; the plan is then unset.
bool cudnn_conv_window(const ops::Conv& op, const std::vector<int64_t>& x_sp, const std::vector<int64_t>& k_sp,
                       const std::vector<int64_t>& y_sp, CudnnWindow* w, std::string* why);
bool cudnn_conv_transpose_window(const ops::ConvTranspose& op, const std::vector<int64_t>& x_sp,
                                 const std::vector<int64_t>& k_sp, const std::vector<int64_t>& y_sp, CudnnWindow* w,
                                 std::string* why);
bool cudnn_pool_window(const ops::Pool& op, const std::vector<int64_t>& x_sp, const std::vector<int64_t>& y_sp,
                       CudnnWindow* w, std::string* why);

// Lowers a Conv, ConvTranspose or Pool step (cudnn_conv.cpp); throws rlx::Error naming the node.
void lower_cudnn(LowerContext& cx, const plan::Step& st);

}  // namespace rlx::cuda
