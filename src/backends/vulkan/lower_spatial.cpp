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
#include <string>
#include <vector>

#include "backends/vulkan/kernels/spatial_conv.h"
#include "backends/vulkan/kernels/spatial_window.h"
#include "backends/vulkan/lower.h"
#include "codegen/language.h"
#include "plan/schedule.h"
#include "plan/spatial_work.h"
#include "rlx/error.h"

namespace rlx::vulkan {
namespace {

constexpr uint32_t kWorkgroup = 256;  // every template's local size
constexpr std::string_view kBackend = "Vulkan";

void check_workgroup(LowerContext& cx, const plan::Step& st) {
  if (cx.info().max_invocations < kWorkgroup)
    throw Error(step_label(st) + ": the Vulkan device " + cx.info().name + " runs at most " +
                std::to_string(cx.info().max_invocations) + " invocations per workgroup; the spatial kernels need " +
                std::to_string(kWorkgroup) + ": run it on the CPU backend");
}


std::string define(const std::string& name, const std::string& value) { return "#define " + name + " " + value + "\n"; }

// Header, dtype helpers and the LD/ST macros of float dtype t (ACC: float, double for f64).
std::string float_prelude(DType t) {
  return define("ACC", glsl_compute_type(t)) + define("LD(v)", glsl_load(t, "(v)")) +
         define("ST(v)", glsl_store(t, "(v)"));
}

std::string storage_type(DType t) { return codegen::glsl_language().storage_type(t); }

// ---- Conv / ConvTranspose ---------------------------------------------------------------

void lower_conv(LowerContext& cx, const plan::Step& st, bool transposed) {
  const plan::TensorRef &x = st.in.at(0), &y = st.out.at(0);
  const plan::ConvWork c = plan::conv_work(st, kBackend);
  const DType t = x.dtype;
  check_workgroup(cx, st);
  std::string src = glsl_header({t}) + glsl_dtype_helpers({t}) + float_prelude(t) +
                    define("TRANSPOSED", transposed ? "1" : "0") + define("HAS_BIAS", c.bias ? "1" : "0");
  if (c.gemm) src += define("TM", std::to_string(c.tm));
  int b = 0;
  src += glsl_buffer(b++, "x", t, true);
  src += glsl_buffer(b++, "w", t, true);
  if (c.bias) src += glsl_buffer(b++, "b", t, true);
  src += glsl_buffer(b++, "y", t, false);
  src += kernels::kConvPush;
  src += c.gemm ? kernels::kConvGemm : kernels::kConvDirect;

  const size_t es = dtype_size(x.storage());
  std::vector<Operand> bind{cx.in(x), cx.in(st.in.at(1))};
  if (c.bias) bind.push_back(cx.in(st.in[2]));
  bind.push_back(cx.out(y));
  std::vector<uint32_t> push;
  for (const Operand& o : bind) push.push_back(o.elem(es));
  const std::vector<uint32_t> params = c.params();
  push.insert(push.end(), params.begin(), params.end());

  const std::string name = std::string(transposed ? "conv_transpose" : "conv") + (c.gemm ? "_gemm" : "_direct");
  if (c.gemm) {
    const DeviceInfo& di = cx.info();
    const auto tiles = c.gemm_tiles();
    const auto cap = [&](int i) { return static_cast<uint32_t>(std::clamp<int64_t>(tiles[i], 1, di.max_groups[i])); };
    cx.dispatch(Kernel{name, src}, bind, push, cap(0), cap(1), cap(2));
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
  const plan::TensorRef &x = st.in.at(0), &y = st.out.at(0);
  const DType t = x.dtype;
  const plan::PoolWork pw = plan::pool_work(st, kBackend);
  check_workgroup(cx, st);
  const bool is_max = pw.is_max;
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
    src += float_prelude(t) + define("COUNT_PAD", pw.count_pad ? "1" : "0");
  }
  src += glsl_buffer(0, "x", t, true) + glsl_buffer(1, "y", t, false) + kernels::kPool;

  const size_t es = dtype_size(x.storage());
  const Operand xo = cx.in(x), yo = cx.out(y);
  std::vector<uint32_t> push{xo.elem(es), yo.elem(es)};
  const std::vector<uint32_t> params = pw.params();
  push.insert(push.end(), params.begin(), params.end());
  cx.dispatch(Kernel{std::string("pool_") + (is_max ? "max" : "avg"), src}, {xo, yo}, push,
              cx.groups_1d(static_cast<uint64_t>(y.numel()), kWorkgroup));
}

// ---- Resize -----------------------------------------------------------------------------

void lower_resize(LowerContext& cx, const plan::Step& st) {
  const plan::TensorRef &x = st.in.at(0), &y = st.out.at(0);
  const DType t = x.dtype;
  const bool wide = t == DType::F64;
  const plan::ResizeWork rw = plan::resize_work(st, wide, kBackend);
  const bool linear = rw.linear;
  std::string src = glsl_header({t, DType::U32}) + glsl_dtype_helpers({t}) + define("R", std::to_string(rw.rank)) +
                    define("LINEAR", linear ? "1" : "0") + define("E", std::to_string(rw.entry_words));
  if (linear) {
    src += float_prelude(t);
    src += define("WT(e)", wide ? "packDouble2x32(uvec2(tab.data[(e) + 2], tab.data[(e) + 3]))"
                                : "uintBitsToFloat(tab.data[(e) + 2])");
  }
  src += glsl_buffer(0, "x", t, true) + glsl_buffer(1, "tab", DType::U32, true) + glsl_buffer(2, "y", t, false) +
         kernels::kResize;

  const size_t es = dtype_size(x.storage());
  const Operand xo = cx.in(x), to = cx.table(rw.table, "resize tables"), yo = cx.out(y);
  std::vector<uint32_t> push{xo.elem(es), to.elem(4), yo.elem(es)};
  push.insert(push.end(), rw.params.begin(), rw.params.end());
  check_workgroup(cx, st);
  cx.dispatch(Kernel{linear ? "resize_linear" : "resize_nearest", src}, {xo, to, yo}, push,
              cx.groups_1d(static_cast<uint64_t>(y.numel()), kWorkgroup));
}

// ---- Im2Col -----------------------------------------------------------------------------

void lower_im2col(LowerContext& cx, const plan::Step& st) {
  const plan::TensorRef &x = st.in.at(0), &y = st.out.at(0);
  const DType t = x.dtype;
  const plan::Im2ColWork iw = plan::im2col_work(st, kBackend);
  check_workgroup(cx, st);
  const std::string src = glsl_header({t}) + define("ZERO", storage_type(t) + "(0)") + glsl_buffer(0, "x", t, true) +
                          glsl_buffer(1, "y", t, false) + kernels::kIm2Col;
  const size_t es = dtype_size(x.storage());
  const Operand xo = cx.in(x), yo = cx.out(y);
  std::vector<uint32_t> push{xo.elem(es), yo.elem(es)};
  push.insert(push.end(), iw.params.begin(), iw.params.end());
  cx.dispatch(Kernel{"im2col", src}, {xo, yo}, push, cx.groups_1d(static_cast<uint64_t>(y.numel()), kWorkgroup));
}

// ---- claims -----------------------------------------------------------------------------

bool kind(std::string_view name) { return plan::spatial_claims_kind(name); }

bool node(const Graph& g, const Node& n, const DeviceInfo*, std::string* why) {
  return plan::spatial_claims_node(kBackend, g, n, why);
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
