// ArgMax / ArgMin, TopK and Sample on CUDA (kernels/select.h).
#include <algorithm>

#include "backends/cuda/cuda_types.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/kernels/random.h"
#include "backends/cuda/kernels/select.h"
#include "backends/cuda/select_lower.h"
#include "rlx/error.h"

namespace rlx::cuda {
namespace {

// One block per row, capped at a few waves (blocks loop over the remaining rows).
unsigned rows_grid(int64_t rows) {
  return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, int64_t(device().sm_count) * 16));
}

unsigned arg_block(int64_t len) {
  if (len >= 4096) return 1024;
  if (len >= 1024) return 512;
  if (len >= 256) return 256;
  return 128;
}

// The rank key of a value of dtype t (see kernels/select.h): key type, bits and RAW_KEY.
std::string key_defines(DType t, std::string* key_type) {
  std::string key = "((unsigned)(v))";  // u8, u32, bool
  *key_type = "unsigned";
  std::string bits = "32";
  if (cuda_float(t)) {
    key = "float_key(to_f(v))";
  } else if (t == DType::F64) {
    key = "double_key(v)";
    *key_type = "unsigned long long";
    bits = "64";
  } else if (t == DType::I8 || t == DType::I16 || t == DType::I32) {
    key = "((unsigned)(int)(v) ^ 0x80000000u)";
  } else if (t == DType::I64) {
    key = "((unsigned long long)(v) ^ 0x8000000000000000ull)";
    *key_type = "unsigned long long";
    bits = "64";
  }
  return "#define KBITS " + bits + "\n#define RAW_KEY(v) " + key + "\n";
}

}  // namespace

void lower_arg_reduce(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const auto& g = std::get<plan::AxisGeom>(st.geom);
  const bool is_max = std::holds_alternative<ops::ArgMax>(st.op);
  const bool last = is_max ? std::get<ops::ArgMax>(st.op).select_last : std::get<ops::ArgMin>(st.op).select_last;
  const int64_t outputs = g.outer * g.inner;
  if (outputs == 0) return;
  if (g.axis == 0)
    throw Error(what + ": " + op_name(st.op) + " over an axis of size 0 of input " + dims_str(st.in.at(0).dims) +
                " has no element to pick");
  const DType t = st.in.at(0).dtype;
  // Compared as float (f32/f16/bf16: exact), double (f64) or long long (integers, bool).
  const bool fl = cuda_float(t);
  const char* c = fl ? "float" : t == DType::F64 ? "double" : "long long";
  const std::string src = kernel_source(ksrc::kArgReduce, {{"T", storage_type(t)}, {"C", c}},
                                        fl ? "#define LOAD_C(v) to_f(v)\n" : "#define LOAD_C(v) ((C)(v))\n");
  const uint8_t* x = cx.ptr(st.in.at(0));
  uint8_t* y = cx.ptr(st.out.at(0));
  std::shared_ptr<KernelLaunch> l;
  if (g.inner == 1) {
    l = std::make_shared<KernelLaunch>(what, get_kernel("arg_rows", src), rows_grid(g.outer), arg_block(g.axis));
    l->arg(x).arg(y).arg(g.outer).arg(g.axis);
  } else {
    l = std::make_shared<KernelLaunch>(what, get_kernel("arg_cols", src), grid_for(outputs, 256), 256);
    l->arg(x).arg(y).arg(g.outer).arg(g.axis).arg(g.inner);
  }
  l->arg(is_max ? 1 : 0).arg(last ? 1 : 0);
  push_launch(cx, l);
}

void lower_topk(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const auto& op = std::get<ops::TopK>(st.op);
  const auto& g = std::get<plan::AxisGeom>(st.geom);
  if (op.k < 1 || op.k > g.axis)
    throw Error(what + ": k = " + std::to_string(op.k) + " is not in [1, " + std::to_string(g.axis) +
                "] for the axis of input " + dims_str(st.in.at(0).dims));
  if (op.k > kCudaTopKMax || g.axis >= (int64_t{1} << 31))
    throw Error(what + ": CUDA topk supports k <= " + std::to_string(kCudaTopKMax) + " and axes below 2^31 elements");
  if (g.outer * g.inner == 0) return;
  const DType t = st.in.at(0).dtype;
  std::string key_type;
  const std::string defines = key_defines(t, &key_type);
  const std::string src = kernel_source(ksrc::kTopK, {{"T", storage_type(t)}, {"KT", key_type}},
                                        defines + ksrc::kSelectCommon);
  auto l = std::make_shared<KernelLaunch>(what, get_kernel("topk_rows", src), rows_grid(g.outer * g.inner), 512);
  l->arg(cx.ptr(st.in.at(0))).arg(cx.ptr(st.out.at(0))).arg(cx.ptr(st.out.at(1)));
  l->arg(g.outer).arg(g.axis).arg(g.inner).arg(op.k).arg(op.largest ? 1 : 0);
  push_launch(cx, l);
}

void lower_sample(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const auto& op = std::get<ops::Sample>(st.op);
  const plan::TensorRef& logits = st.in.at(0);
  if (!cuda_float(logits.dtype)) throw Error(what + ": CUDA sample needs f32/f16/bf16 logits");
  const auto& sg = std::get<plan::SampleGeom>(st.geom);
  const int64_t vocab = sg.vocab, rows = sg.rows;
  if (rows == 0) return;
  if (vocab <= 0) throw Error(what + ": the vocabulary dim is 0; nothing can be sampled");
  if (vocab >= (int64_t{1} << 31)) throw Error(what + ": CUDA sample supports vocabularies below 2^31");
  const int64_t* offset = nullptr;
  if (st.in.size() > 1) {
    if (st.in[1].dtype != DType::I64 || st.in[1].numel() != 1)
      throw Error(what + ": the offset operand must be one i64 value");
    offset = reinterpret_cast<const int64_t*>(cx.ptr(st.in[1]));
  }
  const std::string src = kernel_source(ksrc::kSample, {{"T", storage_type(logits.dtype)}, {"KT", "unsigned"}},
                                        std::string("#define KBITS 32\n") + ksrc::kSelectCommon + ksrc::kPhilox);
  auto l = std::make_shared<KernelLaunch>(what, get_kernel("sample_rows", src), rows_grid(rows), 512);
  l->arg(cx.ptr(logits)).arg(cx.ptr(st.out.at(0))).arg(rows).arg(vocab).arg(offset);
  l->arg(static_cast<unsigned long long>(op.seed)).arg(op.temperature).arg(static_cast<long long>(op.top_k))
      .arg(op.top_p).arg(cx.error_flag());
  push_launch(cx, l);
}

}  // namespace rlx::cuda
