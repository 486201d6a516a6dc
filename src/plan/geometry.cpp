// node_geometry: the per-kind geometry of one static node (see schedule.h for each struct).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "plan/schedule.h"

namespace rlx::plan {
namespace {

using Dims = std::vector<int64_t>;

// Element strides of `in` read broadcast to `out` (numpy rules; size-1 and missing dims -> 0).
Dims broadcast_strides_to(const Dims& in, const Dims& out) {
  Dims st(out.size(), 0);
  const Dims cs = contiguous_strides(in);
  const size_t lead = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) st[lead + d] = in[d] == 1 ? 0 : cs[d];
  return st;
}

// Drops size-1 dims and merges neighbours whose strides are continuous for every operand.
// Returns rank >= 1 (a single dim of 1 for a scalar space).
void coalesce(Dims& dims, std::vector<Dims>& strides) {
  Dims od;
  std::vector<Dims> os(strides.size());
  for (size_t d = dims.size(); d-- > 0;) {
    if (dims[d] == 1) continue;
    bool merge = !od.empty();
    for (size_t k = 0; k < strides.size() && merge; ++k)
      if (strides[k][d] != os[k].back() * od.back()) merge = false;
    if (merge) {
      od.back() *= dims[d];
      continue;
    }
    od.push_back(dims[d]);
    for (size_t k = 0; k < strides.size(); ++k) os[k].push_back(strides[k][d]);
  }
  if (od.empty()) {
    od.push_back(1);
    for (auto& s : os) s.push_back(0);
  }
  std::reverse(od.begin(), od.end());
  for (auto& s : os) std::reverse(s.begin(), s.end());
  dims = std::move(od);
  strides = std::move(os);
}

// The single stride between consecutive flat items of a batch space walked with per-dim
// strides `st` over `dims`, or -1 when there is none.
int64_t flat_stride(const Dims& dims, const Dims& st) {
  if (product(dims) == 0) return 0;
  bool known = false;
  int64_t s = 0;
  int64_t span = 1;  // flat items per step of dim d
  for (size_t d = dims.size(); d-- > 0;) {
    if (dims[d] != 1) {
      if (!known) s = st[d], known = true;  // innermost dim that moves: span is 1 here
      if (st[d] != s * span) return -1;
    }
    span *= dims[d];
  }
  return s;
}

AxisGeom axis_geom(const Dims& dims, int64_t axis) {
  AxisGeom g;
  for (int64_t d = 0; d < axis; ++d) g.outer *= dims[static_cast<size_t>(d)];
  g.axis = dims.empty() ? 1 : dims[static_cast<size_t>(axis)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < dims.size(); ++d) g.inner *= dims[d];
  g.out_axis = g.axis;
  return g;
}

// [outer, prod(dims[axis:])] for norms over the trailing dims.
AxisGeom trailing_geom(const Dims& dims, int64_t axis) {
  AxisGeom g;
  for (int64_t d = 0; d < axis; ++d) g.outer *= dims[static_cast<size_t>(d)];
  g.axis = 1;
  for (size_t d = static_cast<size_t>(axis); d < dims.size(); ++d) g.axis *= dims[d];
  g.out_axis = g.axis;
  return g;
}

MatMulGeom matmul_geom(const Dims& ad, const Dims& bd) {
  if (ad.empty() || bd.empty())
    throw Error("matmul geometry: operands must have rank >= 1, got " + dims_str(ad) + " and " + dims_str(bd));
  MatMulGeom g;
  const bool a1 = ad.size() == 1, b1 = bd.size() == 1;
  g.m = a1 ? 1 : ad[ad.size() - 2];
  g.k = ad.back();
  g.n = b1 ? 1 : bd.back();
  const int64_t kb = b1 ? bd[0] : bd[bd.size() - 2];
  if (kb != g.k)
    throw Error("matmul geometry: contracting dims differ: " + dims_str(ad) + " and " + dims_str(bd));
  const Dims ab(ad.begin(), ad.end() - (a1 ? 1 : 2));
  const Dims bb(bd.begin(), bd.end() - (b1 ? 1 : 2));
  g.batch_dims = broadcast_dims(ab, bb);
  g.batch = product(g.batch_dims);
  g.a_batch_strides = broadcast_strides_to(ab, g.batch_dims);
  g.b_batch_strides = broadcast_strides_to(bb, g.batch_dims);
  for (auto& s : g.a_batch_strides) s *= g.m * g.k;
  for (auto& s : g.b_batch_strides) s *= g.k * g.n;
  g.a_stride = flat_stride(g.batch_dims, g.a_batch_strides);
  g.b_stride = flat_stride(g.batch_dims, g.b_batch_strides);
  g.lda = g.k;
  g.ldb = g.n;
  g.ldc = g.n;
  return g;
}

// A weight shared by every batch item (B broadcast) against a dense A: the batch is more rows of
// one product, [batch * m, k] @ [k, n] (the result's layout is the same), so that the weights
// are read once, not once per batch item (a decode batch of sequences: (B, 1, k) @ [k, n]).
MatMulGeom fold_shared_weight_batch(MatMulGeom g) {
  if (g.batch <= 1 || g.trans_a || g.b_stride != 0 || g.a_stride != g.m * g.k) return g;
  g.m *= g.batch;
  g.batch = 1;
  g.batch_dims.clear();
  g.a_batch_strides.clear();
  g.b_batch_strides.clear();
  g.a_stride = g.b_stride = 0;
  return g;
}

// A plain 2-d product [m, k] @ [k, n].
MatMulGeom gemm_geom(int64_t m, int64_t k, int64_t n) { return matmul_geom({m, k}, {k, n}); }

AttentionGeom attention_geom(const ops::Attention& op, const std::vector<Dims>& in) {
  AttentionGeom g;
  const Dims& q = in.at(0);
  const Dims& k = in.at(1);
  const bool bshd = op.layout == AttnLayout::BSHD;
  g.layout = op.layout;
  g.batch = q.at(0);
  g.q_len = bshd ? q.at(1) : q.at(2);
  g.kv_len = bshd ? k.at(1) : k.at(2);
  g.num_heads = op.num_heads;
  g.num_kv_heads = op.num_kv_heads;
  g.head_dim = op.head_dim;
  g.group = op.num_kv_heads > 0 ? op.num_heads / op.num_kv_heads : 1;
  g.q = g.out = attn_strides(op.layout, g.q_len, g.num_heads, g.head_dim);
  g.k = g.v = attn_strides(op.layout, g.kv_len, g.num_kv_heads, g.head_dim);
  g.scale = op.score_scale != 0.0 ? op.score_scale : 1.0 / std::sqrt(static_cast<double>(op.head_dim));
  g.softcap = op.softcap;
  g.mask = op.mask_kind;
  g.window = op.window;
  if (op.mask_kind == MaskKind::Custom) g.mask_batch_stride = g.kv_len;
  if (op.mask_kind == MaskKind::Positions) g.mask_batch_stride = in.at(3).size() == 2 ? g.q_len : 0;
  if (op.mask_kind == MaskKind::Bias) {
    const Dims& bd = in.at(3);
    Dims four(4, 1);
    for (size_t i = 0; i < bd.size(); ++i) four[4 - bd.size() + i] = bd[i];
    const Dims st = broadcast_strides_to(bd, four);
    for (int i = 0; i < 4; ++i) g.bias_strides[i] = st[static_cast<size_t>(i)];
  }
  return g;
}

ReduceGeom reduce_geom(const ops::Reduce& op, const Dims& dims) {
  ReduceGeom g;
  g.kind = op.kind;
  const auto r = static_cast<int64_t>(dims.size());
  std::vector<bool> red(dims.size(), op.axes.empty());
  for (int64_t a : op.axes) red[static_cast<size_t>(normalize_axis(a, r, "reduce"))] = true;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (red[d]) g.count *= dims[d];
    if (dims[d] == 1) continue;
    const uint8_t role = red[d] ? 1 : 0;
    if (!g.dims.empty() && g.reduced.back() == role) {
      g.dims.back() *= dims[d];
      continue;
    }
    g.dims.push_back(dims[d]);
    g.reduced.push_back(role);
  }
  int reduced_groups = 0;
  for (uint8_t x : g.reduced) reduced_groups += x;
  g.simple = reduced_groups <= 1;
  if (g.simple) {
    bool after = false;
    for (size_t i = 0; i < g.dims.size(); ++i) {
      if (g.reduced[i]) { g.reduce = g.dims[i]; after = true; }
      else if (after) g.inner *= g.dims[i];
      else g.outer *= g.dims[i];
    }
  }
  return g;
}

CopyGeom copy_geom(Dims out, Dims in_strides, int64_t in_offset) {
  std::vector<Dims> st{std::move(in_strides)};
  coalesce(out, st);
  return CopyGeom{std::move(out), std::move(st[0]), in_offset};
}

ElementwiseGeom elementwise_geom(const std::vector<Dims>& in, const Dims& out) {
  ElementwiseGeom g;
  g.numel = product(out);
  std::vector<Dims> st;
  for (const Dims& d : in) {
    st.push_back(broadcast_strides_to(d, out));
    if (product(d) != g.numel) g.contiguous = false;
  }
  g.out_dims = out;
  coalesce(g.out_dims, st);
  g.in_strides = std::move(st);
  return g;
}

ChannelGeom channel_geom(const Dims& x, int64_t groups) {
  ChannelGeom g;
  g.n = x.at(0);
  g.channels = x.at(1);
  for (size_t d = 2; d < x.size(); ++d) g.spatial *= x[d];
  g.groups = groups;
  return g;
}

// Attention over the packed qkv rows of a fused block (q, k, v at columns 0, E, 2E).
AttentionGeom packed_attention(int64_t b, int64_t s, int64_t heads, int64_t head_dim) {
  AttentionGeom g;
  const int64_t e = heads * head_dim;
  g.batch = b, g.q_len = s, g.kv_len = s, g.num_heads = heads, g.num_kv_heads = heads, g.head_dim = head_dim;
  g.q = g.k = g.v = AttnStrides{s * 3 * e, 3 * e, head_dim};
  g.out = AttnStrides{s * e, e, head_dim};
  g.scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  g.mask = MaskKind::Custom;
  g.mask_batch_stride = s;
  return g;
}

ScatterAddGeom scatter_add_geom(const ops::ScatterAdd& op, const Dims& data, const Dims& idx, const Dims& upd) {
  const auto rank = static_cast<int64_t>(data.size());
  ScatterAddGeom g;
  g.axis = normalize_axis(op.axis, rank, "scatter_add axis");
  check(static_cast<int64_t>(idx.size()) == rank && upd == idx,
        "scatter_add: indices " + dims_str(idx) + " and updates " + dims_str(upd) +
            " must have one shape of data's rank (data " + dims_str(data) + ")");
  for (int64_t d = 0; d < rank; ++d)
    check(d == g.axis || idx[static_cast<size_t>(d)] <= data[static_cast<size_t>(d)],
          "scatter_add: indices " + dims_str(idx) + " dim " + std::to_string(d) + " exceeds data " + dims_str(data));
  g.axis_size = data[static_cast<size_t>(g.axis)];
  g.count = product(idx);
  g.idx_dims = idx;
  g.data_strides = contiguous_strides(data);
  return g;
}

PadGeom pad_geom(const ops::Pad& op, const Dims& in, const Dims& out) {
  PadGeom g;
  g.out_dims = out;
  g.in_strides = contiguous_strides(in);
  const std::vector<Dims> src = pad_source_index(op, in, out);
  for (const Dims& axis : src) {
    g.source_offset.push_back(static_cast<int64_t>(g.source.size()));
    g.source.insert(g.source.end(), axis.begin(), axis.end());
  }
  return g;
}

}  // namespace

Geometry node_geometry(const Graph& g, const Node& n) {
  std::vector<Dims> in;
  for (Value v : n.inputs) in.push_back(g.shape(v).concrete());
  const Dims out = n.outputs.empty() ? Dims{} : n.outputs[0].concrete();
  const auto rank = [&](size_t i) { return static_cast<int64_t>(in.at(i).size()); };
  return std::visit([&](const auto& op) -> Geometry {
    using T = std::decay_t<decltype(op)>;
    if constexpr (std::is_same_v<T, ops::MatMul>) {
      return fold_shared_weight_batch(matmul_geom(in[0], in[1]));
    } else if constexpr (std::is_same_v<T, ops::MatMulInteger>) {
      return matmul_geom(in[0], in[1]);
    } else if constexpr (std::is_same_v<T, ops::FusedMatMulBiasAct>) {
      MatMulGeom m = fold_shared_weight_batch(matmul_geom(in[0], in[1]));
      m.bias_len = op.has_bias(in.size()) ? product(in[2]) : 0;
      m.residual = op.residual;
      m.activation = op.activation;
      return m;
    } else if constexpr (std::is_same_v<T, ops::LoraMatMul>) {
      MatMulGeom m = matmul_geom(in[0], in[1]);
      m.lora_rank = in[2].back();
      m.lora_scale = op.scale;
      return m;
    } else if constexpr (std::is_same_v<T, ops::GroupedMatMul>) {
      return GroupedMatMulGeom{in[0].at(0), in[0].at(1), in[1].at(2), in[1].at(0)};
    } else if constexpr (std::is_same_v<T, ops::Attention>) {
      return attention_geom(op, in);
    } else if constexpr (std::is_same_v<T, ops::Softmax> || std::is_same_v<T, ops::LogSoftmax> ||
                         std::is_same_v<T, ops::Cumsum>) {
      return axis_geom(in[0], normalize_axis(op.axis, rank(0), T::kName));
    } else if constexpr (std::is_same_v<T, ops::ArgMax> || std::is_same_v<T, ops::ArgMin>) {
      AxisGeom a = axis_geom(in[0], normalize_axis(op.axis, rank(0), T::kName));
      a.out_axis = 1;
      return a;
    } else if constexpr (std::is_same_v<T, ops::TopK>) {
      AxisGeom a = axis_geom(in[0], normalize_axis(op.axis, rank(0), T::kName));
      a.out_axis = op.k;
      return a;
    } else if constexpr (std::is_same_v<T, ops::Gather>) {
      AxisGeom a = axis_geom(in[0], normalize_axis(op.axis, rank(0), T::kName));
      a.out_axis = product(in[1]);
      return a;
    } else if constexpr (std::is_same_v<T, ops::Narrow>) {
      AxisGeom a = axis_geom(in[0], normalize_axis(op.axis, rank(0), T::kName));
      a.start = op.start < 0 ? op.start + a.axis : op.start;
      a.out_axis = op.len;
      return a;
    } else if constexpr (std::is_same_v<T, ops::LayerNorm> || std::is_same_v<T, ops::RmsNorm>) {
      return trailing_geom(in[0], normalize_axis(op.axis, rank(0), T::kName));
    } else if constexpr (std::is_same_v<T, ops::FusedResidualLN> || std::is_same_v<T, ops::FusedResidualRmsNorm>) {
      return trailing_geom(in[0], std::max<int64_t>(rank(0) - 1, 0));
    } else if constexpr (std::is_same_v<T, ops::FusedSwiGLU>) {
      AxisGeom a = axis_geom(in[0], std::max<int64_t>(rank(0) - 1, 0));
      a.out_axis = a.axis / 2;
      return a;
    } else if constexpr (std::is_same_v<T, ops::Reduce>) {
      return reduce_geom(op, in[0]);
    } else if constexpr (std::is_same_v<T, ops::Transpose>) {
      const Dims cs = contiguous_strides(in[0]);
      Dims st;
      for (int64_t p : op.perm) st.push_back(cs.at(static_cast<size_t>(normalize_axis(p, rank(0), "transpose"))));
      return copy_geom(out, std::move(st), 0);
    } else if constexpr (std::is_same_v<T, ops::Expand>) {
      return copy_geom(out, broadcast_strides_to(in[0], out), 0);
    } else if constexpr (std::is_same_v<T, ops::Reverse>) {
      Dims st = contiguous_strides(in[0]);
      int64_t base = 0;
      for (int64_t a : op.axes) {
        const auto ax = static_cast<size_t>(normalize_axis(a, rank(0), "reverse"));
        if (in[0][ax] == 0) return copy_geom(out, st, 0);  // empty: nothing is read
        base += (in[0][ax] - 1) * st[ax];
        st[ax] = -st[ax];
      }
      return copy_geom(out, std::move(st), base);
    } else if constexpr (std::is_same_v<T, ops::Reshape> || std::is_same_v<T, ops::StopGradient>) {
      return copy_geom(out, contiguous_strides(out), 0);
    } else if constexpr (std::is_same_v<T, ops::Concat>) {
      ConcatGeom c;
      const int64_t ax = normalize_axis(op.axis, static_cast<int64_t>(out.size()), "concat");
      const AxisGeom a = axis_geom(out, ax);
      c.outer = a.outer, c.inner = a.inner, c.out_axis = a.axis;
      int64_t col = 0;
      for (const Dims& d : in) {
        c.in_axis.push_back(d.at(static_cast<size_t>(ax)));
        c.col.push_back(col);
        col += c.in_axis.back() * c.inner;
      }
      return c;
    } else if constexpr (std::is_same_v<T, ops::Binary> || std::is_same_v<T, ops::Compare> ||
                         std::is_same_v<T, ops::Where> || std::is_same_v<T, ops::Activation> ||
                         std::is_same_v<T, ops::Cast> || std::is_same_v<T, ops::ElementwiseRegion>) {
      return elementwise_geom(in, out);
    } else if constexpr (std::is_same_v<T, ops::GroupNorm>) {
      return channel_geom(in[0], op.groups);
    } else if constexpr (std::is_same_v<T, ops::LayerNorm2d> || std::is_same_v<T, ops::BatchNormInference>) {
      return channel_geom(in[0], in[0].at(1));
    } else if constexpr (std::is_same_v<T, ops::Rope>) {
      return RopeGeom{in[0].at(0), in[0].at(1), in[0].at(2), op.head_dim, op.n_rot, in[1].size() == 3};
    } else if constexpr (std::is_same_v<T, ops::FusedAttentionBlock> || std::is_same_v<T, ops::FusedTransformerLayer>) {
      FusedBlockGeom f;
      f.batch = in[0].at(0), f.seq = in[0].at(1), f.hidden = in[0].at(2);
      const int64_t rows = f.batch * f.seq;
      f.qkv = gemm_geom(rows, f.hidden, 3 * f.hidden);
      f.out = gemm_geom(rows, f.hidden, f.hidden);
      f.attn = packed_attention(f.batch, f.seq, op.num_heads, op.head_dim);
      if constexpr (std::is_same_v<T, ops::FusedTransformerLayer>) {
        f.ffn = in[7].at(1);
        f.fc1 = gemm_geom(rows, f.hidden, f.ffn);
        f.fc2 = gemm_geom(rows, f.ffn, f.hidden);
      }
      return f;
    } else if constexpr (std::is_same_v<T, ops::ScatterAdd>) {
      return scatter_add_geom(op, in[0], in[1], in[2]);
    } else if constexpr (std::is_same_v<T, ops::Pad>) {
      return pad_geom(op, in[0], out);
    } else if constexpr (std::is_same_v<T, ops::Sample>) {
      return SampleGeom{in[0].size() == 2 ? in[0][0] : 1, in[0].back()};
    } else if constexpr (std::is_same_v<T, ops::Recurrent>) {
      RecurrentGeom r;
      r.seq = in[0].at(op.batch_first ? 1 : 0);
      r.batch = in[0].at(op.batch_first ? 0 : 1);
      r.input = in[0].at(2);
      r.hidden = op.hidden_size;
      r.gates = op.gates();
      r.dirs = op.directions();
      return r;
    } else {
      return GenericGeom{};
    }
  }, n.op);
}

std::vector<std::vector<int64_t>> pad_source_index(const ops::Pad& op, const std::vector<int64_t>& in_dims,
                                                   const std::vector<int64_t>& out_dims) {
  const size_t r = in_dims.size();
  std::vector<std::vector<int64_t>> src(r);
  for (size_t a = 0; a < r; ++a) {
    const int64_t pb = op.pads.empty() ? 0 : op.pads[a];
    const int64_t pe = op.pads.empty() ? 0 : op.pads[r + a];
    const int64_t crop_b = std::max<int64_t>(-pb, 0), crop_e = std::max<int64_t>(-pe, 0);
    const int64_t kept = in_dims[a] - crop_b - crop_e, grow_b = std::max<int64_t>(pb, 0);
    check(kept > 0 || op.mode == PadMode::Constant || out_dims[a] <= kept,
          "pad: cannot " + std::string(enum_name(op.mode)) + "-pad the empty dim " + std::to_string(a));
    src[a].resize(static_cast<size_t>(out_dims[a]));
    for (int64_t o = 0; o < out_dims[a]; ++o) {
      int64_t j = o - grow_b;  // index into the cropped axis
      if (j < 0 || j >= kept) {
        switch (op.mode) {
          case PadMode::Constant: j = -1; break;
          case PadMode::Edge: j = std::clamp<int64_t>(j, 0, kept - 1); break;
          case PadMode::Reflect: j = j < 0 ? -j : 2 * (kept - 1) - j; break;
        }
        check(op.mode == PadMode::Constant || (j >= 0 && j < kept),
              "pad: " + std::string(enum_name(op.mode)) + " pad too large for dim " + std::to_string(a) +
                  " (size " + std::to_string(kept) + ")");
      }
      src[a][static_cast<size_t>(o)] = j < 0 ? -1 : j + crop_b;
    }
  }
  return src;
}

namespace {

// Source coordinate of output index `o` (ONNX coordinate_transformation_mode).
double resize_source_coord(ResizeCoord c, int64_t o, double scale, int64_t in, int64_t out) {
  const double od = static_cast<double>(o);
  switch (c) {
    case ResizeCoord::HalfPixel: return (od + 0.5) / scale - 0.5;
    case ResizeCoord::PytorchHalfPixel: return out > 1 ? (od + 0.5) / scale - 0.5 : 0.0;
    case ResizeCoord::AlignCorners:
      return out == 1 ? 0.0 : od * static_cast<double>(in - 1) / static_cast<double>(out - 1);
    case ResizeCoord::Asymmetric: return od / scale;
  }
  throw Error("resize: invalid coord value");
}

int64_t resize_nearest_index(NearestRound mode, double xs, int64_t in) {
  const double f = std::floor(xs);
  double r;
  switch (mode) {
    case NearestRound::RoundPreferFloor: r = (xs - f == 0.5) ? f : std::round(xs); break;
    case NearestRound::RoundPreferCeil: r = (xs - f == 0.5) ? f + 1 : std::round(xs); break;
    case NearestRound::Floor: r = f; break;
    case NearestRound::Ceil: r = std::ceil(xs); break;
    default: throw Error("resize: invalid nearest value");
  }
  return static_cast<int64_t>(std::clamp(r, 0.0, static_cast<double>(in - 1)));
}

}  // namespace

ResizeAxisTable resize_axis_table(const ops::Resize& op, int64_t axis, int64_t in, int64_t out) {
  ResizeAxisTable t;
  if (out == 0) return t;
  check(in > 0, "resize: cannot resize the empty dim " + std::to_string(axis) + " to size " + std::to_string(out));
  const double scale = op.sizes.empty() ? op.scales.at(static_cast<size_t>(axis))
                                        : static_cast<double>(out) / static_cast<double>(in);
  t.lo.resize(static_cast<size_t>(out));
  t.hi.resize(static_cast<size_t>(out));
  t.w.assign(static_cast<size_t>(out), 0.0);
  for (int64_t o = 0; o < out; ++o) {
    const size_t i = static_cast<size_t>(o);
    const double s = resize_source_coord(op.coord, o, scale, in, out);
    if (op.mode == ResizeMode::Nearest) {
      t.lo[i] = t.hi[i] = resize_nearest_index(op.nearest, s, in);
    } else {
      const double c = std::clamp(s, 0.0, static_cast<double>(in - 1));
      const int64_t l = std::min<int64_t>(static_cast<int64_t>(c), in - 1);
      t.lo[i] = l;
      t.hi[i] = std::min<int64_t>(l + 1, in - 1);
      t.w[i] = c - static_cast<double>(l);
    }
  }
  return t;
}

AttnStrides attn_strides(AttnLayout layout, int64_t seq, int64_t heads, int64_t head_dim) {
  if (layout == AttnLayout::BSHD) return AttnStrides{seq * heads * head_dim, heads * head_dim, head_dim};
  return AttnStrides{heads * seq * head_dim, head_dim, seq * head_dim};
}

uint64_t pad_fill_bits(DType t, double v) {
  switch (t) {
    case DType::F32: {
      const float f = static_cast<float>(v);
      uint32_t u = 0;
      std::memcpy(&u, &f, 4);
      return u;
    }
    case DType::F64: {
      uint64_t u = 0;
      std::memcpy(&u, &v, 8);
      return u;
    }
    case DType::F16: return f32_to_f16_bits(static_cast<float>(v));
    case DType::BF16: return f32_to_bf16_bits(static_cast<float>(v));
    case DType::I8: return static_cast<uint8_t>(static_cast<int8_t>(v));
    case DType::I16: return static_cast<uint16_t>(static_cast<int16_t>(v));
    case DType::I32: return static_cast<uint32_t>(static_cast<int32_t>(v));
    case DType::I64: return static_cast<uint64_t>(static_cast<int64_t>(v));
    case DType::U8: return static_cast<uint8_t>(v);
    case DType::U32: return static_cast<uint32_t>(v);
    case DType::U16: return static_cast<uint16_t>(v);
    case DType::U64: return static_cast<uint64_t>(v);
    case DType::Bool: return v != 0.0 ? 1 : 0;
    default: break;  // the storage-only dtypes: Pad does not run on them (Graph::add_node)
  }
  throw Error(std::string("pad: no fill value for dtype ") + dtype_name(t));
}

}  // namespace rlx::plan
