// Conv / ConvTranspose / Pool steps through cuDNN's convolution and pooling API. Descriptors,
// the algorithm and its workspace size are chosen once per step at lowering time; a run sets
// the variant's handle on the stream and issues the call (capturable into a CUDA graph).
#include "backends/cuda/conv_ops.h"
#include "backends/cuda/cudnn_lib.h"
#include "rlx/error.h"

#ifdef RLX_HAVE_CUDNN
#include <algorithm>
#include <functional>
#include <memory>

#include "backends/cuda/device.h"
#endif

namespace rlx::cuda {

#ifndef RLX_HAVE_CUDNN

void lower_cudnn(LowerContext&, const plan::Step& st) { throw Error(step_label(st) + ": " + cudnn_unavailable_reason()); }

#else

namespace {

// The most workspace one step's algorithm may use.
constexpr size_t kMaxWorkspace = size_t(256) << 20;

// An owned descriptor: created at once, destroyed through the same library.
template <class T>
class Owned {
 public:
  using Destroy = cudnnStatus_t (*)(T);
  Owned(const CudnnApi& api, cudnnStatus_t (*create)(T*), Destroy destroy, const std::string& what) : destroy_(destroy) {
    check_cudnn(api, create(&d_), "creating a cuDNN descriptor", what);
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() {
    if (d_) destroy_(d_);
  }
  T get() const { return d_; }

 private:
  T d_ = nullptr;
  Destroy destroy_;
};
using TensorDesc = Owned<cudnnTensorDescriptor_t>;
using FilterDesc = Owned<cudnnFilterDescriptor_t>;
using ConvDesc = Owned<cudnnConvolutionDescriptor_t>;
using PoolDesc = Owned<cudnnPoolingDescriptor_t>;

std::unique_ptr<TensorDesc> tensor_desc(const CudnnApi& a, const std::string& what) {
  return std::make_unique<TensorDesc>(a, a.cudnnCreateTensorDescriptor, a.cudnnDestroyTensorDescriptor, what);
}

cudnnDataType_t data_type(DType t, const std::string& what) {
  switch (t) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::F16: return CUDNN_DATA_HALF;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    default: break;
  }
  throw Error(what + ": cuDNN runs f32, f16 and bf16 only, got " + dtype_name(t));
}

std::string dims_text(const std::vector<int>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

std::vector<int> nc_dims(const plan::TensorRef& r, const std::vector<int>& sp) {
  std::vector<int> d{static_cast<int>(r.dims.at(0)), static_cast<int>(r.dims.at(1))};  // claims checked the range
  d.insert(d.end(), sp.begin(), sp.end());
  return d;
}

// A packed NCHW / NCDHW tensor descriptor.
std::unique_ptr<TensorDesc> packed_tensor(const CudnnApi& a, DType dt, const std::vector<int>& dims,
                                          const std::string& what) {
  auto t = tensor_desc(a, what);
  std::vector<int> strides(dims.size(), 1);
  for (size_t i = dims.size() - 1; i > 0; --i) strides[i - 1] = strides[i] * dims[i];
  RLX_CUDNN_CHECK(a, cudnnSetTensorNdDescriptor(t->get(), data_type(dt, what), static_cast<int>(dims.size()),
                                                dims.data(), strides.data()),
                  what + " (tensor " + dims_text(dims) + ")");
  return t;
}

// Exact f32 (Precision::Fp32): FMA math only, and only the algorithms that sum products the
// plain way (no FFT, no Winograd transforms, which change the rounding).
bool exact_f32(DType t, const CompileOptions& o) { return t == DType::F32 && o.precision == Precision::Fp32; }

// The first deterministic algorithm of cuDNN's ranked list that fits the workspace limit (and,
// for exact f32, uses neither tensor-core math nor a transform algorithm).
template <class Perf, class Algo>
Perf pick_algorithm(const std::vector<Perf>& perf, int returned, bool exact, std::initializer_list<Algo> transforms,
                    const std::string& what) {
  for (int i = 0; i < returned && i < static_cast<int>(perf.size()); ++i) {
    const Perf& p = perf[static_cast<size_t>(i)];
    if (p.status != CUDNN_STATUS_SUCCESS || p.determinism != CUDNN_DETERMINISTIC || p.memory > kMaxWorkspace) continue;
    if (exact && (p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ||
                  std::find(transforms.begin(), transforms.end(), p.algo) != transforms.end()))
      continue;
    return p;
  }
  throw Error(what + ": cuDNN offers no deterministic algorithm for this convolution within " +
              std::to_string(kMaxWorkspace >> 20) + " MiB of workspace" +
              (exact ? " with exact f32 math (Precision::Tf32 allows tensor cores)" : ""));
}

// The variant's shared handle and workspace; a failure (e.g. a cuDNN sub-library that does not
// load) names the step.
std::shared_ptr<CudnnShared> shared_for(LowerContext& cx, const std::string& what) {
  try {
    return cudnn_shared_for(&cx);
  } catch (const Error& e) {
    throw Error(what + ": " + e.what());
  }
}

// Grows the variant's shared workspace to `bytes`.
void reserve_workspace(LowerContext& cx, CudnnShared& sh, size_t bytes) {
  if (bytes <= sh.workspace_bytes) return;
  const size_t grown = std::max(bytes, 2 * sh.workspace_bytes);
  sh.workspace = cx.scratch(grown, "the cuDNN workspace");
  sh.workspace_bytes = grown;
}

// Adds the step's work, after running it once on a side stream: cuDNN loads its kernels on the
// first call, which must not happen while the variant's stream is being captured. The operands
// hold no data yet; the step only writes its own output.
void add_warmed(LowerContext& cx, DeviceOp op) {
  Stream warm;
  op(warm.get());
  warm.sync();
  cx.add(std::move(op));
}

// y[n, c, ...] += bias[c] for a dense (N, C, P) output, as one generated elementwise kernel.
void add_bias(LowerContext& cx, const plan::TensorRef& y, const plan::TensorRef& bias, const std::string& what) {
  const int64_t n = y.dims.at(0), c = y.dims.at(1), p = y.numel() / std::max<int64_t>(1, n * c);
  plan::ElementwiseGeom g;
  g.numel = y.numel();
  g.contiguous = false;
  g.in_strides.resize(2);
  const int64_t dims[3] = {n, c, p}, ys[3] = {c * p, p, 1}, bs[3] = {0, 1, 0};
  for (int i = 0; i < 3; ++i) {
    if (dims[i] == 1) continue;
    g.out_dims.push_back(dims[i]);
    g.in_strides[0].push_back(ys[i]);
    g.in_strides[1].push_back(bs[i]);
  }
  if (g.out_dims.empty()) g.out_dims = {1}, g.in_strides = {{1}, {1}};
  const std::vector<RegionStep> add{{RegionStepKind::Binary, static_cast<int32_t>(BinaryKind::Add), DType::F32, {0, 1}}};
  uint8_t* yp = cx.ptr(y);
  add_elementwise(cx, add, {y.dtype, bias.dtype}, y.dtype, g, yp, {yp, cx.ptr(bias)}, what + " bias");
}

std::vector<int64_t> spatial(const std::vector<int64_t>& dims) { return {dims.begin() + 2, dims.end()}; }

const float kOne = 1.0f, kZero = 0.0f;  // cuDNN's scaling factors are float for every data type here

// Conv (forward) and ConvTranspose (backward data) share everything but the call.
struct ConvWork {
  std::shared_ptr<CudnnShared> shared;  // declared first: destroyed after the descriptors
  std::unique_ptr<TensorDesc> x, y;     // ConvTranspose: x = its input ("dy"), y = its output ("dx")
  std::unique_ptr<FilterDesc> w;
  std::unique_ptr<ConvDesc> conv;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd{};
  size_t ws_bytes = 0;
  const uint8_t *xp = nullptr, *wp = nullptr;
  uint8_t* yp = nullptr;
  std::string what;
};

void lower_conv(LowerContext& cx, const plan::Step& st, bool transpose) {
  const std::string what = step_label(st);
  const plan::TensorRef &x = st.in.at(0), &w = st.in.at(1), &y = st.out.at(0);
  if (y.numel() == 0) return;
  const DType t = y.dtype;
  const bool exact = exact_f32(t, cx.options());
  const int64_t groups = transpose ? std::get<ops::ConvTranspose>(st.op).groups : std::get<ops::Conv>(st.op).groups;
  CudnnWindow win;
  std::string why;
  const bool ok = transpose ? cudnn_conv_transpose_window(std::get<ops::ConvTranspose>(st.op), spatial(x.dims),
                                                          spatial(w.dims), spatial(y.dims), &win, &why)
                            : cudnn_conv_window(std::get<ops::Conv>(st.op), spatial(x.dims), spatial(w.dims),
                                                spatial(y.dims), &win, &why);
  if (!ok) throw Error(what + ": " + why);

  auto k = std::make_shared<ConvWork>();
  k->shared = shared_for(cx, what);
  k->what = what;
  const CudnnApi& a = k->shared->api;
  cudnnHandle_t h = k->shared->handle.get();
  // Filter (K, C/groups, k...): Conv's weight as is; ConvTranspose's (Cin, Cout/groups, k...) is
  // the filter of the forward convolution from its output (Cout channels) to its input (Cin).
  k->w = std::make_unique<FilterDesc>(a, a.cudnnCreateFilterDescriptor, a.cudnnDestroyFilterDescriptor, what);
  const std::vector<int> wdims = nc_dims(w, win.kernel);
  RLX_CUDNN_CHECK(a, cudnnSetFilterNdDescriptor(k->w->get(), data_type(t, what), CUDNN_TENSOR_NCHW,
                                                static_cast<int>(wdims.size()), wdims.data()),
                  what + " (filter " + dims_text(wdims) + ")");
  k->conv = std::make_unique<ConvDesc>(a, a.cudnnCreateConvolutionDescriptor, a.cudnnDestroyConvolutionDescriptor, what);
  RLX_CUDNN_CHECK(a, cudnnSetConvolutionNdDescriptor(k->conv->get(), static_cast<int>(win.pad.size()), win.pad.data(),
                                                     win.stride.data(), win.dilation.data(), CUDNN_CROSS_CORRELATION,
                                                     CUDNN_DATA_FLOAT),
                  what + " (pads " + dims_text(win.pad) + ", strides " + dims_text(win.stride) + ", dilations " +
                      dims_text(win.dilation) + ")");
  RLX_CUDNN_CHECK(a, cudnnSetConvolutionGroupCount(k->conv->get(), static_cast<int>(groups)), what);
  RLX_CUDNN_CHECK(a, cudnnSetConvolutionMathType(k->conv->get(), exact ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH), what);
  // `win.in` is the side the window slides over (Conv: x; ConvTranspose: its output), `win.out`
  // the windows (Conv: y; ConvTranspose: x).
  const std::vector<int> slid = nc_dims(transpose ? y : x, win.in), windows = nc_dims(transpose ? x : y, win.out);
  k->x = packed_tensor(a, t, transpose ? windows : slid, what);
  k->y = packed_tensor(a, t, transpose ? slid : windows, what);
  std::vector<int> got(windows.size());
  RLX_CUDNN_CHECK(a, cudnnGetConvolutionNdForwardOutputDim(k->conv->get(), (transpose ? k->y : k->x)->get(), k->w->get(),
                                                           static_cast<int>(got.size()), got.data()),
                  what);
  if (got != windows)
    throw Error(what + ": cuDNN computes convolution output dims " + dims_text(got) + " where rlx expects " +
                dims_text(windows) + " (internal error: the CUDA claims should have declined this node)");

  int returned = 0;
  if (!transpose) {
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
    RLX_CUDNN_CHECK(a, cudnnGetConvolutionForwardAlgorithm_v7(h, k->x->get(), k->w->get(), k->conv->get(), k->y->get(),
                                                              static_cast<int>(perf.size()), &returned, perf.data()),
                    what);
    const auto p = pick_algorithm(perf, returned, exact,
                                  {CUDNN_CONVOLUTION_FWD_ALGO_FFT, CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
                                   CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED},
                                  what);
    k->fwd = p.algo;
    if (!exact) RLX_CUDNN_CHECK(a, cudnnSetConvolutionMathType(k->conv->get(), p.mathType), what);
    RLX_CUDNN_CHECK(a, cudnnGetConvolutionForwardWorkspaceSize(h, k->x->get(), k->w->get(), k->conv->get(),
                                                               k->y->get(), k->fwd, &k->ws_bytes),
                    what);
  } else {
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
    RLX_CUDNN_CHECK(a, cudnnGetConvolutionBackwardDataAlgorithm_v7(h, k->w->get(), k->x->get(), k->conv->get(),
                                                                   k->y->get(), static_cast<int>(perf.size()),
                                                                   &returned, perf.data()),
                    what);
    const auto p = pick_algorithm(perf, returned, exact,
                                  {CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING,
                                   CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD,
                                   CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED},
                                  what);
    k->bwd = p.algo;
    if (!exact) RLX_CUDNN_CHECK(a, cudnnSetConvolutionMathType(k->conv->get(), p.mathType), what);
    RLX_CUDNN_CHECK(a, cudnnGetConvolutionBackwardDataWorkspaceSize(h, k->w->get(), k->x->get(), k->conv->get(),
                                                                    k->y->get(), k->bwd, &k->ws_bytes),
                    what);
  }
  reserve_workspace(cx, *k->shared, k->ws_bytes);
  k->xp = cx.ptr(x);
  k->wp = cx.ptr(w);
  k->yp = cx.ptr(y);
  add_warmed(
      cx,
      [k, transpose](cudaStream_t s) {
        const CudnnApi& api = k->shared->api;
        cudnnHandle_t hh = k->shared->handle.get();
        RLX_CUDNN_CHECK(api, cudnnSetStream(hh, s), k->what);
        void* ws = k->ws_bytes ? k->shared->workspace : nullptr;
        if (!transpose)
          RLX_CUDNN_CHECK(api, cudnnConvolutionForward(hh, &kOne, k->x->get(), k->xp, k->w->get(), k->wp, k->conv->get(),
                                                       k->fwd, ws, k->ws_bytes, &kZero, k->y->get(), k->yp),
                          k->what);
        else
          RLX_CUDNN_CHECK(api, cudnnConvolutionBackwardData(hh, &kOne, k->w->get(), k->wp, k->x->get(), k->xp,
                                                            k->conv->get(), k->bwd, ws, k->ws_bytes, &kZero,
                                                            k->y->get(), k->yp),
                          k->what);
      });
  if (st.in.size() > 2) add_bias(cx, y, st.in[2], what);
}

struct PoolWork {
  std::shared_ptr<CudnnShared> shared;
  std::unique_ptr<TensorDesc> x, y;
  std::unique_ptr<PoolDesc> pool;
  const uint8_t* xp = nullptr;
  uint8_t* yp = nullptr;
  std::string what;
};

void lower_pool(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const auto& op = std::get<ops::Pool>(st.op);
  const plan::TensorRef &x = st.in.at(0), &y = st.out.at(0);
  if (y.numel() == 0) return;
  CudnnWindow win;
  std::string why;
  if (!cudnn_pool_window(op, spatial(x.dims), spatial(y.dims), &win, &why)) throw Error(what + ": " + why);
  auto k = std::make_shared<PoolWork>();
  k->shared = shared_for(cx, what);
  k->what = what;
  const CudnnApi& a = k->shared->api;
  const std::vector<int> xd = nc_dims(x, win.in), yd = nc_dims(y, win.out);
  k->x = packed_tensor(a, x.dtype, xd, what);
  k->y = packed_tensor(a, y.dtype, yd, what);
  const cudnnPoolingMode_t mode = op.kind == PoolKind::Max ? CUDNN_POOLING_MAX_DETERMINISTIC
                                  : op.count_include_pad   ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                           : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  k->pool = std::make_unique<PoolDesc>(a, a.cudnnCreatePoolingDescriptor, a.cudnnDestroyPoolingDescriptor, what);
  RLX_CUDNN_CHECK(a, cudnnSetPoolingNdDescriptor(k->pool->get(), mode, CUDNN_PROPAGATE_NAN,
                                                 static_cast<int>(win.kernel.size()), win.kernel.data(), win.pad.data(),
                                                 win.stride.data()),
                  what + " (window " + dims_text(win.kernel) + ", pads " + dims_text(win.pad) + ", strides " +
                      dims_text(win.stride) + ")");
  std::vector<int> got(yd.size());
  RLX_CUDNN_CHECK(a, cudnnGetPoolingNdForwardOutputDim(k->pool->get(), k->x->get(), static_cast<int>(got.size()),
                                                       got.data()),
                  what);
  if (got != yd)
    throw Error(what + ": cuDNN computes pooling output dims " + dims_text(got) + " where rlx expects " +
                dims_text(yd) + " (internal error: the CUDA claims should have declined this node)");
  k->xp = cx.ptr(x);
  k->yp = cx.ptr(y);
  add_warmed(
      cx,
      [k](cudaStream_t s) {
        const CudnnApi& api = k->shared->api;
        cudnnHandle_t h = k->shared->handle.get();
        RLX_CUDNN_CHECK(api, cudnnSetStream(h, s), k->what);
        RLX_CUDNN_CHECK(api, cudnnPoolingForward(h, k->pool->get(), &kOne, k->x->get(), k->xp, &kZero, k->y->get(), k->yp),
                        k->what);
      });
}

}  // namespace

void lower_cudnn(LowerContext& cx, const plan::Step& st) {
  if (std::holds_alternative<ops::Conv>(st.op)) return lower_conv(cx, st, false);
  if (std::holds_alternative<ops::ConvTranspose>(st.op)) return lower_conv(cx, st, true);
  if (std::holds_alternative<ops::Pool>(st.op)) return lower_pool(cx, st);
  throw Error(step_label(st) + ": not a Conv, ConvTranspose or Pool step");
}

#endif  // RLX_HAVE_CUDNN

}  // namespace rlx::cuda
