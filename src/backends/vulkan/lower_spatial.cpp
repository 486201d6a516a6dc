// The spatial family of the Vulkan backend: Conv (1-3 spatial dims), ConvTranspose (2-d, as the
// IR defines it), Pool (max / average, 1-3 spatial dims), Resize (every mode, coordinate
// transform and nearest rounding, through the shared per-axis tables) and Im2Col.
//
// Conv and ConvTranspose run as an implicit GEMM per group with shared-memory tiles (output
// channels x output pixels, K = input channels of the group x window in chunks of 16) when a
// group has at least 8 output channels, else as a direct kernel (one thread per output element;
// depthwise and small channel multipliers). Every geometry is lifted to three spatial dims, so one
// pipeline per (kernel variant, dtype) serves every shape: sizes go in push constants.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backends/vulkan/kernels/spatial_conv.h"
#include "backends/vulkan/kernels/spatial_window.h"
#include "backends/vulkan/lower.h"
#include "codegen/language.h"
#include "plan/schedule.h"
#include "rlx/error.h"

namespace rlx::vulkan {
namespace {

constexpr uint32_t kWorkgroup = 256;  // every template's local size
constexpr int64_t kMaxIndex = INT32_MAX;

// One lifted sliding-window geometry (missing leading spatial dims: size 1, kernel 1, stride 1,
// pad 0, dilation 1).
struct Window3 {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, stride[3] = {1, 1, 1};
  int64_t pad[3] = {0, 0, 0}, pad_end[3] = {0, 0, 0}, dil[3] = {1, 1, 1};
};

std::vector<int64_t> spatial(const std::vector<int64_t>& dims) { return {dims.begin() + 2, dims.end()}; }

Window3 lift(const std::vector<int64_t>& in_sp, const std::vector<int64_t>& out_sp, const std::vector<int64_t>& kernel,
             const std::vector<int64_t>& stride, const std::vector<int64_t>& pads, const std::vector<int64_t>& dilation) {
  Window3 w;
  const size_t nd = in_sp.size(), shift = 3 - nd;
  for (size_t i = 0; i < nd; ++i) {
    w.in[shift + i] = in_sp[i];
    w.out[shift + i] = out_sp[i];
    w.k[shift + i] = kernel[i];
    w.stride[shift + i] = stride.empty() ? 1 : stride[i];
    w.pad[shift + i] = pads.empty() ? 0 : pads[i];
    w.pad_end[shift + i] = pads.empty() ? 0 : pads[nd + i];
    w.dil[shift + i] = dilation.empty() ? 1 : dilation[i];
  }
  return w;
}

// rlx::Error when any operand of the step (or `extra`, a derived extent) does not fit the
// kernels' 32-bit signed indices.
void check_index_range(const plan::Step& st, int64_t extra = 0) {
  int64_t most = extra;
  for (const auto& r : st.in) most = std::max(most, r.numel());
  for (const auto& r : st.out) most = std::max(most, r.numel());
  if (most > kMaxIndex)
    throw Error(step_label(st) + ": the Vulkan spatial kernels index with 32 bits; an operand has " +
                std::to_string(most) + " elements (2^31 or more): split the batch or run it on the CPU/CUDA backend");
}

void check_workgroup(LowerContext& cx, const plan::Step& st) {
  if (cx.info().max_invocations < kWorkgroup)
    throw Error(step_label(st) + ": the Vulkan device " + cx.info().name + " runs at most " +
                std::to_string(cx.info().max_invocations) + " invocations per workgroup; the spatial kernels need " +
                std::to_string(kWorkgroup) + ": run it on the CPU backend");
}

uint32_t u32(int64_t v) { return static_cast<uint32_t>(static_cast<int32_t>(v)); }

std::string define(const std::string& name, const std::string& value) { return "#define " + name + " " + value + "\n"; }

// Header, dtype helpers and the LD/ST macros of float dtype t (ACC: float, double for f64).
std::string float_prelude(DType t) {
  return define("ACC", glsl_compute_type(t)) + define("LD(v)", glsl_load(t, "(v)")) +
         define("ST(v)", glsl_store(t, "(v)"));
}

std::string storage_type(DType t) { return codegen::glsl_language().storage_type(t); }

// ---- Conv / ConvTranspose ---------------------------------------------------------------

void lower_conv(LowerContext& cx, const plan::Step& st, bool transposed) {
  const plan::TensorRef &x = st.in.at(0), &w = st.in.at(1), &y = st.out.at(0);
  const bool bias = st.in.size() > 2;
  const DType t = x.dtype;
  const std::vector<int64_t> &xd = x.dims, &wd = w.dims, &yd = y.dims;
  Window3 win;
  int64_t groups, cg, coutg;
  if (!transposed) {
    const auto& op = std::get<ops::Conv>(st.op);
    groups = op.groups;
    cg = wd[1];
    coutg = wd[0] / groups;
    win = lift(spatial(xd), spatial(yd), spatial(wd), op.stride, op.pads, op.dilation);
  } else {
    const auto& op = std::get<ops::ConvTranspose>(st.op);
    groups = op.groups;
    cg = xd[1] / groups;
    coutg = wd[1];
    win = lift(spatial(xd), spatial(yd), spatial(wd), op.stride, op.pads, op.dilation);
  }
  const int64_t ks = win.k[0] * win.k[1] * win.k[2];
  check_index_range(st, cg * ks);
  check_workgroup(cx, st);
  const int64_t n = xd[0], cin = xd[1], cout = yd[1];
  const int64_t p = win.out[0] * win.out[1] * win.out[2];

  // The GEMM tile pays when a group has enough output channels to fill its rows.
  const bool gemm = coutg >= 8;
  const int tm = coutg >= 48 ? 4 : coutg >= 24 ? 2 : 1;
  std::string src = glsl_header({t}) + glsl_dtype_helpers({t}) + float_prelude(t) +
                    define("TRANSPOSED", transposed ? "1" : "0") + define("HAS_BIAS", bias ? "1" : "0");
  if (gemm) src += define("TM", std::to_string(tm));
  int b = 0;
  src += glsl_buffer(b++, "x", t, true);
  src += glsl_buffer(b++, "w", t, true);
  if (bias) src += glsl_buffer(b++, "b", t, true);
  src += glsl_buffer(b++, "y", t, false);
  src += kernels::kConvPush;
  src += gemm ? kernels::kConvGemm : kernels::kConvDirect;

  const size_t es = dtype_size(x.storage());
  std::vector<Operand> bind{cx.in(x), cx.in(w)};
  if (bias) bind.push_back(cx.in(st.in[2]));
  bind.push_back(cx.out(y));
  std::vector<uint32_t> push;
  for (const Operand& o : bind) push.push_back(o.elem(es));
  for (int64_t v : {n, cin, cg, cout, coutg, groups}) push.push_back(u32(v));
  for (const int64_t* a : {win.in, win.out, win.k, win.stride, win.pad, win.dil})
    for (int i = 0; i < 3; ++i) push.push_back(u32(a[i]));

  const std::string name = std::string(transposed ? "conv_transpose" : "conv") + (gemm ? "_gemm" : "_direct");
  if (gemm) {
    const DeviceInfo& di = cx.info();
    const int64_t bm = 16 * tm;
    const uint32_t gx = static_cast<uint32_t>(std::clamp<int64_t>((n * p + 63) / 64, 1, di.max_groups[0]));
    const uint32_t gy = static_cast<uint32_t>(std::clamp<int64_t>((coutg + bm - 1) / bm, 1, di.max_groups[1]));
    const uint32_t gz = static_cast<uint32_t>(std::clamp<int64_t>(groups, 1, di.max_groups[2]));
    cx.dispatch(Kernel{name, src}, bind, push, gx, gy, gz);
  } else {
    cx.dispatch(Kernel{name, src}, bind, push, cx.groups_1d(static_cast<uint64_t>(y.numel()), kWorkgroup));
  }
}

// ---- Pool -------------------------------------------------------------------------------

// The lowest value of integer dtype t in its max-pool compute type.
std::string int_lowest(DType t) {
  switch (t) {
    case DType::I8: return "int(-128)";
    case DType::I16: return "int(-32768)";
    case DType::I32: return "int(0x80000000u)";
    case DType::I64: return "(int64_t(-9223372036854775807l) - int64_t(1))";
    default: return "0u";  // unsigned
  }
}

// The max-pool compute type of integer dtype t (8/16-bit values widen to 32 bits).
std::string int_compute(DType t) {
  switch (t) {
    case DType::I8:
    case DType::I16:
    case DType::I32: return "int";
    case DType::I64: return "int64_t";
    default: return "uint";
  }
}

void lower_pool(LowerContext& cx, const plan::Step& st) {
  const auto& op = std::get<ops::Pool>(st.op);
  const plan::TensorRef &x = st.in.at(0), &y = st.out.at(0);
  const DType t = x.dtype;
  check_index_range(st);
  check_workgroup(cx, st);
  const Window3 win = lift(spatial(x.dims), spatial(y.dims), op.kernel, op.stride, op.pads, op.dilation);
  const bool is_max = op.kind == PoolKind::Max;
  std::string src = glsl_header({t}) + glsl_dtype_helpers({t}) + define("IS_MAX", is_max ? "1" : "0");
  if (is_max) {
    if (is_float(t)) {
      const std::string mt = glsl_compute_type(t);
      src += define("IS_FLOAT", "1") + define("MT", mt) + define("LOWEST", mt + "(uintBitsToFloat(0xff800000u))") +
             define("LDM(v)", glsl_load(t, "(v)")) + define("STM(v)", glsl_store(t, "(v)"));
    } else {
      const std::string mt = int_compute(t);
      src += define("IS_FLOAT", "0") + define("MT", mt) + define("LOWEST", int_lowest(t)) +
             define("LDM(v)", mt + "(v)") + define("STM(v)", storage_type(t) + "(v)");
    }
  } else {
    src += float_prelude(t) + define("COUNT_PAD", op.count_include_pad ? "1" : "0");
  }
  src += glsl_buffer(0, "x", t, true) + glsl_buffer(1, "y", t, false) + kernels::kPool;

  const size_t es = dtype_size(x.storage());
  const Operand xo = cx.in(x), yo = cx.out(y);
  std::vector<uint32_t> push{xo.elem(es), yo.elem(es), u32(x.dims[0] * x.dims[1])};
  for (const int64_t* a : {win.in, win.out, win.k, win.stride, win.pad, win.pad_end, win.dil})
    for (int i = 0; i < 3; ++i) push.push_back(u32(a[i]));
  cx.dispatch(Kernel{std::string("pool_") + (is_max ? "max" : "avg"), src}, {xo, yo}, push,
              cx.groups_1d(static_cast<uint64_t>(y.numel()), kWorkgroup));
}

// ---- Resize -----------------------------------------------------------------------------

void lower_resize(LowerContext& cx, const plan::Step& st) {
  const auto& op = std::get<ops::Resize>(st.op);
  const plan::TensorRef &x = st.in.at(0), &y = st.out.at(0);
  const DType t = x.dtype;
  const size_t r = x.dims.size();
  check_index_range(st);
  const bool linear = op.mode == ResizeMode::Linear;
  const bool wide = t == DType::F64;
  const int e = linear && wide ? 4 : 3;
  // The per-axis tables: lo, hi and the weight of hi, as the CPU computes them.
  std::vector<uint32_t> words;
  for (size_t a = 0; a < r; ++a) {
    const plan::ResizeAxisTable tab = plan::resize_axis_table(op, static_cast<int64_t>(a), x.dims[a], y.dims[a]);
    for (size_t o = 0; o < tab.lo.size(); ++o) {
      words.push_back(u32(tab.lo[o]));
      words.push_back(u32(tab.hi[o]));
      if (wide && linear) {
        uint64_t bits;
        std::memcpy(&bits, &tab.w[o], 8);
        words.push_back(static_cast<uint32_t>(bits));
        words.push_back(static_cast<uint32_t>(bits >> 32));
      } else {
        const float wf = static_cast<float>(tab.w[o]);
        uint32_t bits;
        std::memcpy(&bits, &wf, 4);
        words.push_back(bits);
      }
    }
  }
  if (words.size() > static_cast<size_t>(kMaxIndex))
    throw Error(step_label(st) + ": the Vulkan resize table does not fit 32-bit indices");
  std::string src = glsl_header({t, DType::U32}) + glsl_dtype_helpers({t}) + define("R", std::to_string(r)) +
                    define("LINEAR", linear ? "1" : "0") + define("E", std::to_string(e));
  if (linear) {
    src += float_prelude(t);
    src += define("WT(e)", wide ? "packDouble2x32(uvec2(tab.data[(e) + 2], tab.data[(e) + 3]))"
                                : "uintBitsToFloat(tab.data[(e) + 2])");
  }
  src += glsl_buffer(0, "x", t, true) + glsl_buffer(1, "tab", DType::U32, true) + glsl_buffer(2, "y", t, false) +
         kernels::kResize;

  const size_t es = dtype_size(x.storage());
  const Operand xo = cx.in(x), to = cx.table(words, "resize tables"), yo = cx.out(y);
  std::vector<uint32_t> push{xo.elem(es), to.elem(4), yo.elem(es), u32(y.numel())};
  for (size_t a = 0; a < r; ++a) push.push_back(u32(y.dims[a]));
  int64_t stride = 1;
  std::vector<uint32_t> xs(r);
  for (size_t a = r; a-- > 0;) {
    xs[a] = u32(stride);
    stride *= x.dims[a];
  }
  push.insert(push.end(), xs.begin(), xs.end());
  check_workgroup(cx, st);
  cx.dispatch(Kernel{linear ? "resize_linear" : "resize_nearest", src}, {xo, to, yo}, push,
              cx.groups_1d(static_cast<uint64_t>(y.numel()), kWorkgroup));
}

// ---- Im2Col -----------------------------------------------------------------------------

void lower_im2col(LowerContext& cx, const plan::Step& st) {
  const auto& op = std::get<ops::Im2Col>(st.op);
  const plan::TensorRef &x = st.in.at(0), &y = st.out.at(0);
  const DType t = x.dtype;
  check_index_range(st);
  check_workgroup(cx, st);
  const int64_t h = x.dims[2], wdt = x.dims[3];
  const int64_t s0 = op.stride.empty() ? 1 : op.stride[0], s1 = op.stride.empty() ? 1 : op.stride[1];
  const int64_t d0 = op.dilation.empty() ? 1 : op.dilation[0], d1 = op.dilation.empty() ? 1 : op.dilation[1];
  const int64_t p0 = op.pads.empty() ? 0 : op.pads[0], p1 = op.pads.empty() ? 0 : op.pads[1];
  const int64_t e0 = op.pads.empty() ? 0 : op.pads[2], e1 = op.pads.empty() ? 0 : op.pads[3];
  const int64_t oh = (h + p0 + e0 - d0 * (op.kernel[0] - 1) - 1) / s0 + 1;
  const int64_t ow = (wdt + p1 + e1 - d1 * (op.kernel[1] - 1) - 1) / s1 + 1;
  if (oh * ow != y.dims[2])
    throw Error(step_label(st) + ": im2col output " + std::to_string(y.dims[2]) + " positions do not match the " +
                std::to_string(oh) + "x" + std::to_string(ow) + " windows of its attributes");
  const std::string src = glsl_header({t}) + define("ZERO", storage_type(t) + "(0)") + glsl_buffer(0, "x", t, true) +
                          glsl_buffer(1, "y", t, false) + kernels::kIm2Col;
  const size_t es = dtype_size(x.storage());
  const Operand xo = cx.in(x), yo = cx.out(y);
  std::vector<uint32_t> push{xo.elem(es), yo.elem(es)};
  for (int64_t v : {y.numel(), h, wdt, oh, ow, op.kernel[0], op.kernel[1], s0, s1, p0, p1, d0, d1}) push.push_back(u32(v));
  cx.dispatch(Kernel{"im2col", src}, {xo, yo}, push, cx.groups_1d(static_cast<uint64_t>(y.numel()), kWorkgroup));
}

// ---- claims -----------------------------------------------------------------------------

bool kind(std::string_view name) {
  return name == "conv" || name == "conv_transpose" || name == "pool" || name == "resize" || name == "im2col";
}

bool node(const Graph& g, const Node& n, const DeviceInfo* info, std::string* why) {
  (void)info;
  const std::string name = op_name(n.op);
  const DType t = g.shape(n.inputs.at(0)).dtype;
  for (const Value& v : n.inputs)
    if (g.shape(v).dtype != t && name != "resize")
      return refuse(why, "the Vulkan " + name + " kernel needs every operand in x's dtype");
  if (std::holds_alternative<ops::Conv>(n.op) || std::holds_alternative<ops::ConvTranspose>(n.op)) {
    if (!is_float(t)) return refuse(why, "the Vulkan " + name + " kernel computes f32, f16, bf16 or f64, got " + dtype_name(t));
    const int64_t rank = g.shape(n.inputs[0]).rank();
    if (std::holds_alternative<ops::ConvTranspose>(n.op) && rank != 4)
      return refuse(why, "the Vulkan conv_transpose kernel is 2-d (rank-4 x)");
    if (rank < 3 || rank > 5) return refuse(why, "the Vulkan conv kernel takes 1..3 spatial dims");
    return true;
  }
  if (const auto* p = std::get_if<ops::Pool>(&n.op)) {
    if (p->kind == PoolKind::Avg && !is_float(t))
      return refuse(why, "the Vulkan average pool computes float tensors, got " + std::string(dtype_name(t)));
    if (p->kind == PoolKind::Max && !is_float(t) && !is_int(t))
      return refuse(why, "the Vulkan max pool computes float and integer tensors, got " + std::string(dtype_name(t)));
    if (p->kind != PoolKind::Max && p->kind != PoolKind::Avg) return refuse(why, "the Vulkan pool has no such kind");
    return true;
  }
  if (const auto* r = std::get_if<ops::Resize>(&n.op)) {
    if (r->mode != ResizeMode::Nearest && r->mode != ResizeMode::Linear)
      return refuse(why, "the Vulkan resize kernel has no such mode");
    if (r->mode == ResizeMode::Linear && !is_float(t))
      return refuse(why, "the Vulkan linear resize computes float tensors, got " + std::string(dtype_name(t)));
    // Coordinate transforms and nearest roundings come from plan::resize_axis_table (the CPU's).
    return true;
  }
  if (std::holds_alternative<ops::Im2Col>(n.op)) return true;  // a copy of any dtype
  return refuse(why, "the Vulkan spatial family has no kernel for '" + name + "'");
}

}  // namespace

const FamilyClaims kSpatialClaims{kind, node};

bool lower_spatial_family(LowerContext& cx, const plan::Step& st) {
  if (std::holds_alternative<ops::Conv>(st.op)) lower_conv(cx, st, false);
  else if (std::holds_alternative<ops::ConvTranspose>(st.op)) lower_conv(cx, st, true);
  else if (std::holds_alternative<ops::Pool>(st.op)) lower_pool(cx, st);
  else if (std::holds_alternative<ops::Resize>(st.op)) lower_resize(cx, st);
  else if (std::holds_alternative<ops::Im2Col>(st.op)) lower_im2col(cx, st);
  else return false;
  return true;
}

}  // namespace rlx::vulkan
