// The conv op family of the CUDA backend (see lower.h): Conv (1-3 spatial dims), ConvTranspose
// (2-d) and Pool (max / average, 1-3 spatial dims) through cuDNN. A node is claimed only when
// cuDNN loads and runs it exactly as the CPU backend does; everything else is declined with
// the reason (so legalize reports it).
#include "backends/cuda/conv_ops.h"

#include <climits>

#include "backends/cuda/cuda_types.h"
#include "backends/cuda/cudnn_lib.h"

namespace rlx::cuda {
namespace {

bool fail(std::string* why, const std::string& msg) {
  if (why) *why = msg;
  return false;
}

std::vector<int64_t> or_default(const std::vector<int64_t>& v, size_t n, int64_t def) {
  return v.empty() ? std::vector<int64_t>(n, def) : v;
}

// Windows cuDNN slides over `in` with `pad` on both ends (floor mode), -1 when none fits.
int64_t cudnn_windows(int64_t in, int64_t pad, int64_t extent, int64_t stride) {
  const int64_t span = in + 2 * pad - extent;
  return span < 0 ? -1 : span / stride + 1;
}

// The shared part of every plan: pad = begin pad, and cuDNN's window count must be `out` on
// every axis. `in`/`out` as in CudnnWindow; `kernel` the kernel sizes.
bool plan_window(const std::string& op, const std::vector<int64_t>& in, const std::vector<int64_t>& kernel,
                 const std::vector<int64_t>& out, const std::vector<int64_t>& stride_attr,
                 const std::vector<int64_t>& dilation_attr, const std::vector<int64_t>& pads_attr, CudnnWindow* w,
                 std::string* why) {
  const size_t nd = in.size();
  const auto st = or_default(stride_attr, nd, 1), dl = or_default(dilation_attr, nd, 1);
  const auto pd = or_default(pads_attr, 2 * nd, 0);
  CudnnWindow r;
  if (nd == 1) r = CudnnWindow{{1}, {1}, {1}, {0}, {1}, {1}};  // 1-d as 2-d: a leading axis of 1
  for (size_t i = 0; i < nd; ++i) {
    for (int64_t v : {in[i], out[i], kernel[i], st[i], dl[i], pd[i]})
      if (v > INT_MAX) return fail(why, op + ": a size or attribute exceeds cuDNN's 32-bit range");
    const int64_t extent = dl[i] * (kernel[i] - 1) + 1;
    const int64_t got = cudnn_windows(in[i], pd[i], extent, st[i]);
    if (got != out[i])
      return fail(why, op + ": cuDNN pads both ends of an axis alike; with pads " + dims_str(pd) + " along spatial dim " +
                           std::to_string(i) + " it gives " + std::to_string(got) + " windows where rlx needs " +
                           std::to_string(out[i]) + " (make the begin and end pads equal, or run on the CPU)");
    r.in.push_back(static_cast<int>(in[i]));
    r.out.push_back(static_cast<int>(out[i]));
    r.kernel.push_back(static_cast<int>(kernel[i]));
    r.pad.push_back(static_cast<int>(pd[i]));
    r.stride.push_back(static_cast<int>(st[i]));
    r.dilation.push_back(static_cast<int>(dl[i]));
  }
  if (w) *w = std::move(r);
  return true;
}

std::vector<int64_t> spatial(const std::vector<int64_t>& dims) { return {dims.begin() + 2, dims.end()}; }

std::vector<int64_t> static_dims(const Shape& s) {
  std::vector<int64_t> d;
  for (int64_t i = 0; i < s.rank(); ++i) d.push_back(s[i].value);
  return d;
}

}  // namespace

bool cudnn_conv_window(const ops::Conv& op, const std::vector<int64_t>& x_sp, const std::vector<int64_t>& k_sp,
                       const std::vector<int64_t>& y_sp, CudnnWindow* w, std::string* why) {
  return plan_window("conv", x_sp, k_sp, y_sp, op.stride, op.dilation, op.pads, w, why);
}

bool cudnn_conv_transpose_window(const ops::ConvTranspose& op, const std::vector<int64_t>& x_sp,
                                 const std::vector<int64_t>& k_sp, const std::vector<int64_t>& y_sp, CudnnWindow* w,
                                 std::string* why) {
  // cuDNN's backward-data convolution: the forward convolution over y (with pad = the begin
  // pad) must give exactly x's windows, i.e. output_padding + pad_begin - pad_end in [0, stride).
  std::string inner;
  if (plan_window("conv_transpose", y_sp, k_sp, x_sp, op.stride, op.dilation, op.pads, w, &inner)) return true;
  if (inner.find("32-bit") != std::string::npos) return fail(why, inner);
  return fail(why, "conv_transpose: cuDNN's backward-data convolution cannot produce this output size: it needs "
                   "output_padding + pad_begin - pad_end in [0, stride) on every axis (pads " +
                       dims_str(or_default(op.pads, 4, 0)) + ", output_padding " +
                       dims_str(or_default(op.output_padding, 2, 0)) + ", stride " +
                       dims_str(or_default(op.stride, 2, 1)) + "); run it on the CPU");
}

bool cudnn_pool_window(const ops::Pool& op, const std::vector<int64_t>& x_sp, const std::vector<int64_t>& y_sp,
                       CudnnWindow* w, std::string* why) {
  const size_t nd = x_sp.size();
  const auto dl = or_default(op.dilation, nd, 1);
  for (size_t i = 0; i < nd; ++i)
    if (dl[i] != 1 && op.kernel.at(i) != 1)
      return fail(why, "pool: cuDNN pooling has no dilation (dilation " + dims_str(dl) + "); run it on the CPU");
  if (!plan_window("pool", x_sp, op.kernel, y_sp, op.stride, {}, op.pads, w, why)) return false;
  if (op.kind == PoolKind::Avg && op.count_include_pad) {
    // cuDNN divides by the whole window; rlx counts only the taps inside [-pad_begin, in + pad_end),
    // which differs when a ceil_mode window runs past the end pad.
    const auto st = or_default(op.stride, nd, 1), pd = or_default(op.pads, 2 * nd, 0);
    for (size_t i = 0; i < nd; ++i)
      if ((y_sp[i] - 1) * st[i] - pd[i] + op.kernel[i] > x_sp[i] + pd[nd + i])
        return fail(why, "pool: a ceil_mode window runs past the end pad along spatial dim " + std::to_string(i) +
                             "; cuDNN would count the missing taps in the average (count_include_pad); run it on "
                             "the CPU");
  }
  return true;
}

bool claims_kind_conv(std::string_view op_name) {
  return op_name == "conv" || op_name == "conv_transpose" || op_name == "pool";
}

bool claims_node_conv(const Graph& g, const Node& n, std::string* why) {
  const std::string name = op_name(n.op);
  if (const std::string r = cudnn_unavailable_reason(); !r.empty()) return fail(why, r);
  const Shape& x = g.shape(n.inputs.at(0));
  const Shape& y = n.outputs.at(0);
  if (!cuda_float(x.dtype))
    return fail(why, "CUDA " + name + " (cuDNN) needs f32, f16 or bf16, got " + dtype_name(x.dtype));
  for (const Value& v : n.inputs)
    if (g.shape(v).dtype != x.dtype) return fail(why, "CUDA " + name + " needs every operand in x's dtype");
  for (const Value& v : n.inputs)
    if (!g.shape(v).is_static()) return fail(why, "CUDA " + name + " needs static shapes, got " + g.shape(v).str());
  if (!y.is_static()) return fail(why, "CUDA " + name + " needs static shapes, got " + y.str());
  const std::vector<int64_t> xd = static_dims(x), yd = static_dims(y);
  const int64_t y_numel = product(yd);
  for (const Value& v : n.inputs) {
    const int64_t numel = product(static_dims(g.shape(v)));
    if (numel > INT_MAX || y_numel > INT_MAX)
      return fail(why, "CUDA " + name + ": a tensor of over 2^31 elements exceeds cuDNN's 32-bit strides");
    if (numel == 0 && y_numel > 0)
      return fail(why, "CUDA " + name + ": cuDNN needs non-empty operands, got " + g.shape(v).str());
  }
  if (y_numel == 0) return true;  // nothing to compute
  if (const auto* c = std::get_if<ops::Conv>(&n.op)) {
    const std::vector<int64_t> wd = static_dims(g.shape(n.inputs.at(1)));
    return cudnn_conv_window(*c, spatial(xd), spatial(wd), spatial(yd), nullptr, why);
  }
  if (const auto* c = std::get_if<ops::ConvTranspose>(&n.op)) {
    const std::vector<int64_t> wd = static_dims(g.shape(n.inputs.at(1)));
    return cudnn_conv_transpose_window(*c, spatial(xd), spatial(wd), spatial(yd), nullptr, why);
  }
  if (const auto* p = std::get_if<ops::Pool>(&n.op)) return cudnn_pool_window(*p, spatial(xd), spatial(yd), nullptr, why);
  return fail(why, "the CUDA conv family has no kernel for '" + name + "'");
}

bool lower_conv_family(LowerContext& cx, const plan::Step& st) {
  if (!std::holds_alternative<ops::Conv>(st.op) && !std::holds_alternative<ops::ConvTranspose>(st.op) &&
      !std::holds_alternative<ops::Pool>(st.op))
    return false;
  lower_cudnn(cx, st);
  return true;
}

}  // namespace rlx::cuda
