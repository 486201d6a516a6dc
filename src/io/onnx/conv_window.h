#pragma once
// The sliding-window attributes of the ONNX conv and pooling ops (Conv, ConvInteger, QLinearConv,
// MaxPool, AveragePool, LpPool): kernel_shape, strides, dilations, pads and auto_pad, checked and
// resolved to explicit pads.
#include <string>
#include <vector>

#include "io/onnx/importer.h"

namespace rlx::onnx_io {

struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads;
};

// Every entry of an integer attribute list is at least `min` (else the node's error).
void need_at_least(const NodeCtx& c, const std::vector<int64_t>& v, int64_t min, const std::string& what);

// The window of input 0 (rank kernel.size() + 2) for `kernel`: strides / dilations default to 1,
// pads to 0; auto_pad SAME_UPPER / SAME_LOWER (static spatial dims) and VALID resolved to pads.
Window window(const NodeCtx& c, const std::vector<int64_t>& kernel);

// The kernel of a conv whose weight is input `w_input` (Cout, C/group, k1..kk): its static spatial
// dims, checked against input 0 (same rank) and the kernel_shape attribute when given.
std::vector<int64_t> conv_kernel(const NodeCtx& c, size_t w_input);
// `group` >= 1 divides the weight's Cout, and input 0's C = C/group x group (when static).
void check_conv_group(const NodeCtx& c, size_t w_input, int64_t group);

}  // namespace rlx::onnx_io
