// Shape inference for the transformer family: Rope, Attention, FusedSwiGLU,
// FusedAttentionBlock, FusedTransformerLayer.
//
// Dims are compared with `dims_compatible` (ir/infer_util.h): equal, or at least one side
// symbolic (a mismatch can then only be seen at run time, where the CPU kernels re-run
// inference on the concrete shapes).
#include <cmath>
#include <string>

#include "ir/infer_util.h"
#include "rlx/ops.h"

namespace rlx {
namespace {

using infer::dims_compatible;

bool is_static_eq(const Dim& d, int64_t v) { return d.is_static() && d.value == v; }

std::string i2s(int64_t v) { return std::to_string(v); }

void require_float(const char* op, const char* what, const Shape& s) {
  if (!is_float(s.dtype))
    throw Error(std::string(op) + ": " + what + " must be a float tensor (f32, f16, bf16, f64), got " +
                s.str());
}

void require_same_dtype(const char* op, const char* what, const Shape& s, const Shape& ref,
                        const char* ref_name) {
  if (s.dtype != ref.dtype)
    throw Error(std::string(op) + ": " + what + " " + s.str() + " must have the dtype of " + ref_name +
                " " + ref.str());
}

void require_rank(const char* op, const char* what, const Shape& s, int64_t rank, const char* layout) {
  if (s.rank() != rank)
    throw Error(std::string(op) + ": " + what + " must be rank " + i2s(rank) + " " + layout + ", got " +
                s.str());
}

// Checks that `d` (dim `idx` of `s`) can equal `want`, naming both.
void require_dim(const char* op, const char* what, const Shape& s, int64_t idx, const Dim& want,
                 const std::string& want_desc) {
  if (!dims_compatible(s[idx], want))
    throw Error(std::string(op) + ": " + what + " " + s.str() + " has dim " + i2s(idx) + " = " +
                s[idx].str() + " but " + want_desc + " = " + want.str());
}

void require_positive(const char* op, const char* attr, int64_t v) {
  if (v <= 0) throw Error(std::string(op) + ": " + attr + " must be positive, got " + i2s(v));
}

// Key-padding mask (B, Skv): any numeric or bool dtype.
void check_key_padding_mask(const char* op, const Shape& mask, const Dim& batch, const Dim& skv) {
  if (mask.rank() != 2)
    throw Error(std::string(op) + ": the key-padding mask must be rank 2 (B, Skv) = (" + batch.str() +
                ", " + skv.str() + "), got " + mask.str());
  require_dim(op, "key-padding mask", mask, 0, batch, "the batch size");
  require_dim(op, "key-padding mask", mask, 1, skv, "the key length");
}

// A weight of an exact 1-d or 2-d static shape.
void check_weight(const char* op, const char* what, const Shape& w, const Shape& ref,
                  std::initializer_list<int64_t> dims) {
  require_same_dtype(op, what, w, ref, "hidden");
  bool ok = w.rank() == static_cast<int64_t>(dims.size());
  if (ok) {
    int64_t i = 0;
    for (int64_t d : dims) ok = ok && is_static_eq(w[i++], d);
  }
  if (!ok) {
    std::string want;
    for (int64_t d : dims) want += (want.empty() ? "" : ",") + i2s(d);
    throw Error(std::string(op) + ": " + what + " must have shape [" + want + "], got " + w.str());
  }
}

// hidden (B, S, E) with static E = num_heads * head_dim; returns E.
int64_t check_hidden(const char* op, const Shape& hidden, int64_t num_heads, int64_t head_dim) {
  require_positive(op, "num_heads", num_heads);
  require_positive(op, "head_dim", head_dim);
  require_float(op, "hidden", hidden);
  require_rank(op, "hidden", hidden, 3, "(B, S, E)");
  const int64_t e = infer::mul(num_heads, head_dim, std::string(op) + ": num_heads x head_dim");
  if (!is_static_eq(hidden[2], e))
    throw Error(std::string(op) + ": hidden " + hidden.str() + " must have last dim E = num_heads * head_dim = " +
                i2s(num_heads) + " * " + i2s(head_dim) + " = " + i2s(e) +
                (hidden[2].is_symbolic() ? " (a static size is needed)" : ""));
  return e;
}

}  // namespace

// ---------------------------------------------------------------------------------------
std::vector<Shape> ops::Rope::infer(std::span<const Shape> in) const {
  const char* op = "rope";
  require_positive(op, "head_dim", head_dim);
  if (n_rot <= 0 || n_rot % 2 != 0 || n_rot > head_dim)
    throw Error("rope: n_rot must be even and in (0, head_dim = " + i2s(head_dim) + "], got " + i2s(n_rot));
  const Shape& x = in[0];
  const Shape& cos = in[1];
  const Shape& sin = in[2];
  require_float(op, "x", x);
  require_rank(op, "x", x, 4, "(B, S, H, head_dim)");
  if (!dims_compatible(x[3], Dim(head_dim)))
    throw Error("rope: x " + x.str() + " has last dim " + x[3].str() + " but head_dim = " + i2s(head_dim));
  require_same_dtype(op, "cos", cos, x, "x");
  require_same_dtype(op, "sin", sin, x, "x");
  if (cos.dims != sin.dims)
    throw Error("rope: cos " + cos.str() + " and sin " + sin.str() + " must have the same shape");
  if (cos.rank() != 2 && cos.rank() != 3)
    throw Error("rope: cos/sin must be (S, n_rot/2) or (B, S, n_rot/2), got " + cos.str());
  const int64_t r = cos.rank();
  if (r == 3) require_dim(op, "cos", cos, 0, x[0], "x's batch dim");
  require_dim(op, "cos", cos, r - 2, x[1], "x's sequence dim");
  require_dim(op, "cos", cos, r - 1, Dim(n_rot / 2), "n_rot/2");
  return {x};
}

// ---------------------------------------------------------------------------------------
std::vector<Shape> ops::Attention::infer(std::span<const Shape> in) const {
  const char* op = "attention";
  require_positive(op, "num_heads", num_heads);
  require_positive(op, "num_kv_heads", num_kv_heads);
  require_positive(op, "head_dim", head_dim);
  if (num_heads % num_kv_heads != 0)
    throw Error("attention: num_heads = " + i2s(num_heads) + " must be divisible by num_kv_heads = " +
                i2s(num_kv_heads));
  if (mask_kind == MaskKind::SlidingWindow) {
    if (window <= 0)
      throw Error("attention: sliding_window masking needs window > 0, got " + i2s(window));
  } else if (window != 0) {
    throw Error("attention: window = " + i2s(window) + " is only meaningful with mask_kind sliding_window (got " +
                enum_name(mask_kind) + "); set it to 0");
  }
  if (!std::isfinite(score_scale))
    throw Error("attention: score_scale must be finite (0 = 1/sqrt(head_dim)), got " + std::to_string(score_scale));
  if (!std::isfinite(softcap) || softcap < 0)
    throw Error("attention: softcap must be finite and >= 0 (0 = off), got " + std::to_string(softcap));
  if (static_cast<uint8_t>(mask_kind) > static_cast<uint8_t>(MaskKind::Positions))
    throw Error("attention: invalid mask_kind value " + i2s(static_cast<int>(mask_kind)));
  if (static_cast<uint8_t>(layout) > static_cast<uint8_t>(AttnLayout::BHSD))
    throw Error("attention: invalid layout value " + i2s(static_cast<int>(layout)));

  const bool needs_mask =
      mask_kind == MaskKind::Custom || mask_kind == MaskKind::Bias || mask_kind == MaskKind::Positions;
  if (needs_mask && in.size() != 4)
    throw Error(std::string("attention: mask_kind ") + enum_name(mask_kind) +
                " needs a 4th input (the mask), got " + i2s(static_cast<int64_t>(in.size())) + " inputs");
  if (!needs_mask && in.size() != 3)
    throw Error(std::string("attention: mask_kind ") + enum_name(mask_kind) +
                " takes no mask input; got a 4th input " + in[3].str() +
                " (use mask_kind custom, bias or positions to pass one)");

  const bool bshd = layout == AttnLayout::BSHD;
  const char* lay = bshd ? "(B, S, H, D) for layout bshd" : "(B, H, S, D) for layout bhsd";
  const int64_t sa = bshd ? 1 : 2;  // sequence axis
  const int64_t ha = bshd ? 2 : 1;  // head axis
  const Shape& q = in[0];
  const Shape& k = in[1];
  const Shape& v = in[2];
  require_float(op, "q", q);
  require_same_dtype(op, "k", k, q, "q");
  require_same_dtype(op, "v", v, q, "q");
  require_rank(op, "q", q, 4, lay);
  require_rank(op, "k", k, 4, lay);
  require_rank(op, "v", v, 4, lay);
  require_dim(op, "q", q, ha, Dim(num_heads), "num_heads");
  require_dim(op, "k", k, ha, Dim(num_kv_heads), "num_kv_heads");
  require_dim(op, "v", v, ha, Dim(num_kv_heads), "num_kv_heads");
  require_dim(op, "q", q, 3, Dim(head_dim), "head_dim");
  require_dim(op, "k", k, 3, Dim(head_dim), "head_dim");
  require_dim(op, "v", v, 3, Dim(head_dim), "head_dim");
  require_dim(op, "k", k, 0, q[0], "q's batch size");
  require_dim(op, "v", v, 0, q[0], "q's batch size");
  require_dim(op, "v", v, sa, k[sa], "k's sequence length");

  if (mask_kind == MaskKind::Custom) {
    check_key_padding_mask(op, in[3], q[0], k[sa]);
  } else if (mask_kind == MaskKind::Bias) {
    const Shape& bias = in[3];
    require_same_dtype(op, "bias", bias, q, "q");
    const std::vector<Dim> target{q[0], Dim(num_heads), q[sa], k[sa]};
    bool ok = bias.rank() <= 4;
    for (int64_t i = 0; ok && i < bias.rank(); ++i) {
      const Dim& d = bias[bias.rank() - 1 - i];
      const Dim& t = target[static_cast<size_t>(3 - i)];
      ok = is_static_eq(d, 1) || dims_compatible(d, t);
    }
    if (!ok)
      throw Error("attention: bias " + bias.str() + " must broadcast to (B, Hq, Sq, Skv) = (" + target[0].str() +
                  ", " + target[1].str() + ", " + target[2].str() + ", " + target[3].str() + ")");
  } else if (mask_kind == MaskKind::Positions) {
    const Shape& pos = in[3];
    if (pos.dtype != DType::I32 && pos.dtype != DType::I64)
      throw Error("attention: mask_kind positions takes i32 or i64 positions, got " + pos.str() + " (cast them)");
    if (pos.rank() == 1) {
      require_dim(op, "positions", pos, 0, q[sa], "q's sequence length");
    } else if (pos.rank() == 2) {
      require_dim(op, "positions", pos, 0, q[0], "q's batch size");
      require_dim(op, "positions", pos, 1, q[sa], "q's sequence length");
    } else {
      throw Error("attention: positions must be (Sq) = (" + q[sa].str() + ") or (B, Sq) = (" + q[0].str() + ", " +
                  q[sa].str() + "), got " + pos.str());
    }
  }
  return {q};
}

// ---------------------------------------------------------------------------------------
std::vector<Shape> ops::FusedSwiGLU::infer(std::span<const Shape> in) const {
  const Shape& x = in[0];
  require_float("fused_swiglu", "x", x);
  if (x.rank() < 1) throw Error("fused_swiglu: x must have rank >= 1 (..., 2N), got " + x.str());
  const Dim& last = x[x.rank() - 1];
  if (last.is_symbolic())
    throw Error("fused_swiglu: the last dim of x " + x.str() + " must be static (it is split in halves)");
  if (last.value % 2 != 0)
    throw Error("fused_swiglu: the last dim of x " + x.str() + " must be even (..., 2N), got " + last.str());
  Shape out = x;
  out.dims.back() = Dim(last.value / 2);
  return {out};
}

// ---------------------------------------------------------------------------------------
std::vector<Shape> ops::FusedAttentionBlock::infer(std::span<const Shape> in) const {
  const char* op = "fused_attention_block";
  const size_t want = 4 + (has_bias ? 2 : 0) + (has_rope ? 2 : 0);
  if (in.size() != want)
    throw Error(std::string(op) + ": expects " + i2s(static_cast<int64_t>(want)) +
                " inputs [hidden, qkv_w, out_w, mask" + (has_bias ? ", qkv_b, out_b" : "") +
                (has_rope ? ", cos, sin" : "") + "] for has_bias=" + (has_bias ? "true" : "false") +
                " has_rope=" + (has_rope ? "true" : "false") + ", got " + i2s(static_cast<int64_t>(in.size())));
  const Shape& hidden = in[0];
  const int64_t e = check_hidden(op, hidden, num_heads, head_dim);
  check_weight(op, "qkv_w", in[1], hidden, {e, 3 * e});
  check_weight(op, "out_w", in[2], hidden, {e, e});
  check_key_padding_mask(op, in[3], hidden[0], hidden[1]);
  size_t next = 4;
  if (has_bias) {
    check_weight(op, "qkv_b", in[next], hidden, {3 * e});
    check_weight(op, "out_b", in[next + 1], hidden, {e});
    next += 2;
  }
  if (has_rope) {
    if (head_dim % 2 != 0)
      throw Error(std::string(op) + ": has_rope needs an even head_dim, got " + i2s(head_dim));
    for (size_t i = 0; i < 2; ++i) {
      const Shape& t = in[next + i];
      const char* what = i == 0 ? "cos" : "sin";
      require_same_dtype(op, what, t, hidden, "hidden");
      if (t.rank() != 2 || !dims_compatible(t[0], hidden[1]) || !is_static_eq(t[1], head_dim / 2))
        throw Error(std::string(op) + ": " + what + " must be (S, head_dim/2) = (" + hidden[1].str() + ", " +
                    i2s(head_dim / 2) + "), got " + t.str());
    }
  }
  return {hidden};
}

// ---------------------------------------------------------------------------------------
std::vector<Shape> ops::FusedTransformerLayer::infer(std::span<const Shape> in) const {
  const char* op = "fused_transformer_layer";
  if (activation != ActKind::Gelu && activation != ActKind::GeluApprox && activation != ActKind::Relu &&
      activation != ActKind::Silu)
    throw Error(std::string(op) + ": activation must be gelu, gelu_approx, relu or silu, got " +
                enum_name(activation));
  if (!std::isfinite(eps) || eps < 0)
    throw Error(std::string(op) + ": eps must be finite and >= 0, got " + std::to_string(eps));
  const Shape& hidden = in[0];
  const int64_t e = check_hidden(op, hidden, num_heads, head_dim);
  // [hidden, qkv_w, qkv_b, out_w, out_b, ln1_g, ln1_b, fc1_w, fc1_b, fc2_w, fc2_b, ln2_g, ln2_b, mask]
  check_weight(op, "qkv_w", in[1], hidden, {e, 3 * e});
  check_weight(op, "qkv_b", in[2], hidden, {3 * e});
  check_weight(op, "out_w", in[3], hidden, {e, e});
  check_weight(op, "out_b", in[4], hidden, {e});
  check_weight(op, "ln1_g", in[5], hidden, {e});
  check_weight(op, "ln1_b", in[6], hidden, {e});
  const Shape& fc1 = in[7];
  if (fc1.rank() != 2 || fc1[1].is_symbolic())
    throw Error(std::string(op) + ": fc1_w must be a static (E, F) = (" + i2s(e) + ", F) matrix, got " + fc1.str());
  const int64_t f = fc1[1].value;
  check_weight(op, "fc1_w", fc1, hidden, {e, f});
  check_weight(op, "fc1_b", in[8], hidden, {f});
  check_weight(op, "fc2_w", in[9], hidden, {f, e});
  check_weight(op, "fc2_b", in[10], hidden, {e});
  check_weight(op, "ln2_g", in[11], hidden, {e});
  check_weight(op, "ln2_b", in[12], hidden, {e});
  check_key_padding_mask(op, in[13], hidden[0], hidden[1]);
  return {hidden};
}

}  // namespace rlx
