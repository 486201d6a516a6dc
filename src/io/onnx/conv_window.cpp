// The sliding-window attributes of the ONNX conv and pooling ops (conv_window.h).
#include "io/onnx/conv_window.h"

#include <algorithm>

namespace rlx::onnx_io {

void need_at_least(const NodeCtx& c, const std::vector<int64_t>& v, int64_t min, const std::string& what) {
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] < min)
      c.fail(what + "[" + std::to_string(i) + "] is " + std::to_string(v[i]) + "; it must be >= " + std::to_string(min));
}

Window window(const NodeCtx& c, const std::vector<int64_t>& kernel) {
  const size_t k = kernel.size();
  if (c.shape(0).rank() != static_cast<int64_t>(k) + 2)
    c.fail("input " + c.shape(0).str() + " must have rank " + std::to_string(k + 2) + " for a " + std::to_string(k) +
           "-d kernel");
  Window w;
  w.kernel = kernel;
  w.strides = c.ints("strides", std::vector<int64_t>(k, 1));
  w.dilations = c.ints("dilations", std::vector<int64_t>(k, 1));
  w.pads = c.ints("pads", std::vector<int64_t>(2 * k, 0));
  if (w.strides.size() != k || w.dilations.size() != k || w.pads.size() != 2 * k)
    c.fail("strides (" + std::to_string(w.strides.size()) + "), dilations (" + std::to_string(w.dilations.size()) +
           ") and pads (" + std::to_string(w.pads.size()) + ") must match the " + std::to_string(k) +
           " spatial dims (pads: 2 per dim)");
  need_at_least(c, kernel, 1, "kernel_shape");
  need_at_least(c, w.strides, 1, "strides");
  need_at_least(c, w.dilations, 1, "dilations");
  need_at_least(c, w.pads, 0, "pads");
  const std::string auto_pad = c.s("auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") return w;
  if (auto_pad == "VALID") {
    std::fill(w.pads.begin(), w.pads.end(), 0);
    return w;
  }
  if (auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER") c.fail("auto_pad '" + auto_pad + "' is not supported");
  const auto& dims = c.shape(0).dims;
  for (size_t i = 0; i < k; ++i) {
    const Dim& d = dims[i + 2];
    if (d.is_symbolic()) c.fail("auto_pad needs static spatial dims");
    const int64_t out = (d.value + w.strides[i] - 1) / w.strides[i];
    const int64_t eff = (kernel[i] - 1) * w.dilations[i] + 1;
    const int64_t total = std::max<int64_t>(0, (out - 1) * w.strides[i] + eff - d.value);
    const int64_t small = total / 2, big = total - small;
    w.pads[i] = auto_pad == "SAME_UPPER" ? small : big;
    w.pads[i + k] = auto_pad == "SAME_UPPER" ? big : small;
  }
  return w;
}

std::vector<int64_t> conv_kernel(const NodeCtx& c, size_t w_input) {
  const Shape& ws = c.shape(w_input);
  if (ws.rank() < 3) c.fail("weights must have rank >= 3, got " + ws.str());
  if (c.shape(0).rank() != ws.rank())
    c.fail("input " + c.shape(0).str() + " and weights " + ws.str() + " must have the same rank");
  std::vector<int64_t> kernel;
  for (int64_t i = 2; i < ws.rank(); ++i) {
    if (ws.dims[static_cast<size_t>(i)].is_symbolic()) c.fail("symbolic kernel dims");
    kernel.push_back(ws.dims[static_cast<size_t>(i)].value);
  }
  if (c.has("kernel_shape") && c.ints("kernel_shape") != kernel) c.fail("kernel_shape does not match the weights");
  return kernel;
}

void check_conv_group(const NodeCtx& c, size_t w_input, int64_t group) {
  const Shape& ws = c.shape(w_input);
  if (group < 1) c.fail("group is " + std::to_string(group) + "; it must be >= 1");
  const Dim& cin = c.shape(0).dims[1];
  const Dim& wc = ws.dims[1];
  if (cin.is_static() && wc.is_static() && cin.value != wc.value * group)
    c.fail("input channels " + std::to_string(cin.value) + " != weight channels " + std::to_string(wc.value) +
           " x group " + std::to_string(group));
  if (ws.dims[0].is_static() && ws.dims[0].value % group != 0)
    c.fail("group " + std::to_string(group) + " does not divide the " + std::to_string(ws.dims[0].value) +
           " output channels");
}

}  // namespace rlx::onnx_io
