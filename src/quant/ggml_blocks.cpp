#include "quant/ggml_blocks.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "rlx/dtype.h"
#include "rlx/limits.h"

namespace rlx {
namespace {

constexpr GgmlTypeInfo kTypes[] = {
    {GgmlType::F32, "F32", 1, 4, true, true},          {GgmlType::F16, "F16", 1, 2, true, true},
    {GgmlType::Q4_0, "Q4_0", 32, 18, true, true},      {GgmlType::Q4_1, "Q4_1", 32, 20, true, true},
    {GgmlType::Q5_0, "Q5_0", 32, 22, true, true},      {GgmlType::Q5_1, "Q5_1", 32, 24, true, true},
    {GgmlType::Q8_0, "Q8_0", 32, 34, true, true},      {GgmlType::Q2_K, "Q2_K", 256, 84, true, false},
    {GgmlType::Q3_K, "Q3_K", 256, 110, true, false},  {GgmlType::Q4_K, "Q4_K", 256, 144, true, true},
    {GgmlType::Q5_K, "Q5_K", 256, 176, true, true},    {GgmlType::Q6_K, "Q6_K", 256, 210, true, true},
    {GgmlType::Q8_K, "Q8_K", 256, 292, false, false},  {GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66, false, false},
    {GgmlType::IQ2_XS, "IQ2_XS", 256, 74, false, false}, {GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98, false, false},
    {GgmlType::IQ1_S, "IQ1_S", 256, 50, false, false}, {GgmlType::IQ4_NL, "IQ4_NL", 32, 18, false, false},
    {GgmlType::IQ3_S, "IQ3_S", 256, 110, false, false}, {GgmlType::IQ2_S, "IQ2_S", 256, 82, false, false},
    {GgmlType::IQ4_XS, "IQ4_XS", 256, 136, false, false}, {GgmlType::I8, "I8", 1, 1, false, false},
    {GgmlType::I16, "I16", 1, 2, false, false},        {GgmlType::I32, "I32", 1, 4, false, false},
    {GgmlType::I64, "I64", 1, 8, false, false},        {GgmlType::F64, "F64", 1, 8, true, false},
    {GgmlType::IQ1_M, "IQ1_M", 256, 56, false, false}, {GgmlType::BF16, "BF16", 1, 2, true, true},
    {GgmlType::TQ1_0, "TQ1_0", 256, 54, false, false}, {GgmlType::TQ2_0, "TQ2_0", 256, 66, false, false},
    {GgmlType::MXFP4, "MXFP4", 32, 17, false, false},
};

std::string codec_names(bool quantizers) {
  std::string s;
  for (const auto& t : kTypes)
    if (quantizers ? t.quantize : t.dequantize) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t type) {
  for (const auto& t : kTypes)
    if (static_cast<uint32_t>(t.type) == type) return &t;
  return nullptr;
}

const GgmlTypeInfo& ggml_type_info(GgmlType type) {
  const GgmlTypeInfo* t = ggml_type_info(static_cast<uint32_t>(type));
  if (!t) throw Error("ggml type " + std::to_string(static_cast<uint32_t>(type)) + " is not a type rlx knows");
  return *t;
}

const char* ggml_type_name(GgmlType type) { return ggml_type_info(type).name; }

GgmlType ggml_type_from_name(std::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const auto& t : kTypes)
    if (upper == t.name) return t.type;
  std::string all;
  for (const auto& t : kTypes) all += (all.empty() ? "" : ", ") + std::string(t.name);
  throw Error("unknown ggml type '" + std::string(name) + "' (known: " + all + ")");
}

namespace {
constexpr std::pair<DType, GgmlType> kStored[] = {
    {DType::F32, GgmlType::F32}, {DType::F16, GgmlType::F16}, {DType::BF16, GgmlType::BF16}, {DType::F64, GgmlType::F64},
    {DType::I8, GgmlType::I8},   {DType::I16, GgmlType::I16}, {DType::I32, GgmlType::I32},   {DType::I64, GgmlType::I64},
};
}  // namespace

std::optional<GgmlType> ggml_type_of(DType dtype) {
  for (const auto& [d, g] : kStored)
    if (d == dtype) return g;
  return std::nullopt;
}

std::optional<DType> dtype_of_ggml(GgmlType type) {
  for (const auto& [d, g] : kStored)
    if (g == type) return d;
  return std::nullopt;
}

int64_t ggml_nbytes(GgmlType type, int64_t elements, const std::string& what) {
  const GgmlTypeInfo& t = ggml_type_info(type);
  if (elements < 0) throw Error(what + ": negative element count " + std::to_string(elements));
  if (elements % t.block_elements != 0)
    throw Error(what + ": " + std::to_string(elements) + " values are not a whole number of " + t.name + " blocks of " +
                std::to_string(t.block_elements));
  return checked_mul(elements / t.block_elements, t.block_bytes, what + ": the byte size");
}

namespace quant {
namespace {

float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_bits_to_f32(h);
}

// Stores `v` as f16 and returns the value stored (the quantizers compute with it).
float store_f16(uint8_t* p, float v, int64_t block, const char* type) {
  const uint16_t h = f32_to_f16_bits(v);
  const float back = f16_bits_to_f32(h);
  if (!std::isfinite(back))
    throw Error(std::string("quantize ") + type + ": block " + std::to_string(block) + " needs a scale of " +
                std::to_string(v) + ", beyond the f16 range; the values are too large for " + type);
  std::memcpy(p, &h, 2);
  return back;
}

// Rounds to the nearest integer in [lo, hi] (v finite or not: NaN goes to lo).
int round_clamp(float v, int lo, int hi) {
  if (!(v > static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return std::clamp(static_cast<int>(std::nearbyint(v)), lo, hi);
}

// ---- 32-value blocks ------------------------------------------------------------------
// 4-bit values: j < 16 in the low nibble of qs[j], j >= 16 in the high nibble of qs[j - 16].
int nibble(const uint8_t* qs, int j) { return j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4); }
void put_nibbles(uint8_t* qs, const int* q) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
}
uint32_t load_u32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
void store_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

void deq_q4_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(nibble(b + 2, j) - 8);
}
void deq_q4_1(const uint8_t* b, float* y) {
  const float d = load_f16(b), m = load_f16(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(nibble(b + 4, j)) + m;
}
void deq_q5_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint32_t qh = load_u32(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>((nibble(b + 6, j) | static_cast<int>((qh >> j) & 1) << 4) - 16);
}
void deq_q5_1(const uint8_t* b, float* y) {
  const float d = load_f16(b), m = load_f16(b + 2);
  const uint32_t qh = load_u32(b + 4);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(nibble(b + 8, j) | static_cast<int>((qh >> j) & 1) << 4) + m;
}
void deq_q8_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
}

// The value of largest magnitude (the first one on ties), signed.
float signed_absmax(const float* x, int n) {
  float best = 0;
  for (int j = 0; j < n; ++j)
    if (std::fabs(x[j]) > std::fabs(best)) best = x[j];
  return best;
}

// Symmetric blocks: the largest-magnitude value maps to -half exactly; q in [0, 2*half).
void quant_symmetric(const float* x, uint8_t* b, int64_t blk, int half, int* q, const char* type) {
  const float d = store_f16(b, signed_absmax(x, 32) / static_cast<float>(-half), blk, type);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < 32; ++j) q[j] = round_clamp(x[j] * id + static_cast<float>(half), 0, 2 * half - 1);
}
// Affine blocks: d = (max - min) / levels, m = min; q in [0, levels].
void quant_affine(const float* x, uint8_t* b, int64_t blk, int levels, int* q, const char* type) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < 32; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
  const float d = store_f16(b, (hi - lo) / static_cast<float>(levels), blk, type);
  const float m = store_f16(b + 2, lo, blk, type);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < 32; ++j) q[j] = round_clamp((x[j] - m) * id, 0, levels);
}

void q_q4_0(const float* x, uint8_t* b, int64_t blk) {
  int q[32];
  quant_symmetric(x, b, blk, 8, q, "Q4_0");
  put_nibbles(b + 2, q);
}
void q_q4_1(const float* x, uint8_t* b, int64_t blk) {
  int q[32];
  quant_affine(x, b, blk, 15, q, "Q4_1");
  put_nibbles(b + 4, q);
}
void put_q5(uint8_t* qh, uint8_t* qs, const int* q) {
  int low[32];
  uint32_t high = 0;
  for (int j = 0; j < 32; ++j) low[j] = q[j] & 0xF, high |= static_cast<uint32_t>(q[j] >> 4) << j;
  store_u32(qh, high);
  put_nibbles(qs, low);
}
void q_q5_0(const float* x, uint8_t* b, int64_t blk) {
  int q[32];
  quant_symmetric(x, b, blk, 16, q, "Q5_0");
  put_q5(b + 2, b + 6, q);
}
void q_q5_1(const float* x, uint8_t* b, int64_t blk) {
  int q[32];
  quant_affine(x, b, blk, 31, q, "Q5_1");
  put_q5(b + 4, b + 8, q);
}
void q_q8_0(const float* x, uint8_t* b, int64_t blk) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = store_f16(b, amax / 127.0f, blk, "Q8_0");
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(round_clamp(x[j] * id, -127, 127)));
}

// ---- 256-value K blocks ---------------------------------------------------------------
// The 6-bit scale and min of sub-block j (0..7) in the 12 packed bytes.
void get_scale_min(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}
void put_scale_min(uint8_t* s, const int* sc, const int* mn) {
  std::memset(s, 0, 12);
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
  }
}

// Q4_K / Q5_K: value l of sub-block s (s = 2c + h, l < 32) has its low nibble in qs[32c + l]
// (low nibble for h = 0, high for h = 1) and, for Q5_K, bit 4 in bit s of qh[l].
int k_low(const uint8_t* qs, int s, int l) {
  const uint8_t v = qs[32 * (s / 2) + l];
  return (s % 2) ? v >> 4 : v & 0xF;
}

void deq_qk(const uint8_t* b, float* y, bool five) {
  const float d = load_f16(b), dmin = load_f16(b + 2);
  uint8_t q[256];
  int sc[8], mn[8];
  k_block_ints(five ? GgmlType::Q5_K : GgmlType::Q4_K, b, q, sc, mn);
  for (int s = 0; s < 8; ++s) {
    const float step = d * static_cast<float>(sc[s]), off = dmin * static_cast<float>(mn[s]);
    for (int l = 0; l < 32; ++l) y[32 * s + l] = step * static_cast<float>(q[32 * s + l]) - off;
  }
}
void deq_q4_k(const uint8_t* b, float* y) { deq_qk(b, y, false); }
void deq_q5_k(const uint8_t* b, float* y) { deq_qk(b, y, true); }

void quant_qk(const float* x, uint8_t* b, int64_t blk, bool five) {
  const char* type = five ? "Q5_K" : "Q4_K";
  const int levels = five ? 31 : 15;
  // Each sub-block covers [-min, -min + levels * step] with min >= 0: the offset is rounded up
  // to a multiple of dmin, then the step up to a multiple of d, so no value is clamped.
  float lo[8], hi[8];
  float max_min = 0;
  for (int s = 0; s < 8; ++s) {
    lo[s] = std::min(0.0f, *std::min_element(x + 32 * s, x + 32 * s + 32));
    hi[s] = *std::max_element(x + 32 * s, x + 32 * s + 32);
    max_min = std::max(max_min, -lo[s]);
  }
  const float dmin = store_f16(b + 2, max_min / 63.0f, blk, type);
  int mn[8], sc[8];
  float off[8], span[8], max_span = 0;
  for (int s = 0; s < 8; ++s) {
    mn[s] = dmin > 0 ? std::min(63, static_cast<int>(std::ceil(-lo[s] / dmin))) : 0;
    off[s] = dmin * static_cast<float>(mn[s]);
    span[s] = (hi[s] + off[s]) / static_cast<float>(levels);
    max_span = std::max(max_span, span[s]);
  }
  const float d = store_f16(b, max_span / 63.0f, blk, type);
  uint8_t* qh = b + 16;
  uint8_t* qs = five ? b + 48 : b + 16;
  if (five) std::memset(qh, 0, 32);
  std::memset(qs, 0, 128);
  for (int s = 0; s < 8; ++s) {
    sc[s] = d > 0 ? std::min(63, static_cast<int>(std::ceil(span[s] / d))) : 0;
    const float step = d * static_cast<float>(sc[s]);
    const float inv = step > 0 ? 1.0f / step : 0.0f;
    for (int l = 0; l < 32; ++l) {
      const int q = round_clamp((x[32 * s + l] + off[s]) * inv, 0, levels);
      qs[32 * (s / 2) + l] |= static_cast<uint8_t>((q & 0xF) << (4 * (s % 2)));
      if (five) qh[l] |= static_cast<uint8_t>((q >> 4) << s);
    }
  }
  put_scale_min(b + 4, sc, mn);
}
void q_q4_k(const float* x, uint8_t* b, int64_t blk) { quant_qk(x, b, blk, false); }
void q_q5_k(const float* x, uint8_t* b, int64_t blk) { quant_qk(x, b, blk, true); }

// Q2_K / Q3_K: 2-bit values, value i = 128c + 32s + l (c < 2, s < 4, l < 32) in bits 2s..2s+1
// of qs[32c + l]; 16 sub-blocks of 16 values.
int two_bits(const uint8_t* qs, int i) {
  const int c = i / 128, s = (i % 128) / 32, l = i % 32;
  return (qs[32 * c + l] >> (2 * s)) & 3;
}
// Q2_K: scales[16] at 0 (low nibble scale, high nibble min), qs[64] at 16, d at 80, dmin at 82.
void deq_q2_k(const uint8_t* b, float* y) {
  const float d = load_f16(b + 80), dmin = load_f16(b + 82);
  for (int i = 0; i < 256; ++i) {
    const uint8_t sc = b[i / 16];
    y[i] = d * static_cast<float>(sc & 0xF) * static_cast<float>(two_bits(b + 16, i)) - dmin * static_cast<float>(sc >> 4);
  }
}
// Q3_K: hmask[32] at 0 (bit k of hmask[l] for value 32k + l; a clear bit subtracts 4), qs[64] at
// 32, scales[12] at 96 (16 x 6 bits, minus 32: the low 4 bits of scale j in byte j % 8, low
// nibble for j < 8, high for j >= 8; the high 2 bits in byte 8 + j % 4 at bit 2 * (j / 4)), d at 108.
void deq_q3_k(const uint8_t* b, float* y) {
  const float d = load_f16(b + 108);
  const uint8_t* sc = b + 96;
  for (int i = 0; i < 256; ++i) {
    const int j = i / 16;
    const int low = (sc[j % 8] >> (j < 8 ? 0 : 4)) & 0xF;
    const int high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
    const int scale = (low | high << 4) - 32;
    const int q = two_bits(b + 32, i) - (((b[i % 32] >> (i / 32)) & 1) ? 0 : 4);
    y[i] = d * static_cast<float>(scale) * static_cast<float>(q);
  }
}

// Q6_K: ql[128] at 0, qh[64] at 128, scales[16] at 192, d at 208. Value i = 128h + 32k + l.
// Its scale is scales[i / 16] (8h + 2k + l / 16).
struct Q6Pos {
  int ql, shift_l, qh, shift_h;
};
Q6Pos q6_pos(int i) {
  const int h = i / 128, k = (i % 128) / 32, l = i % 32;
  return {64 * h + l + 32 * (k & 1), 4 * (k >> 1), 32 * h + l, 2 * k};
}
void deq_q6_k(const uint8_t* b, float* y) {
  const float d = load_f16(b + 208);
  uint8_t q[256];
  int sc[16];
  k_block_ints(GgmlType::Q6_K, b, q, sc, nullptr);
  for (int i = 0; i < 256; ++i) y[i] = d * static_cast<float>(sc[i / 16]) * static_cast<float>(q[i] - 32);
}
void q_q6_k(const float* x, uint8_t* b, int64_t blk) {
  // Sub-block j (values 16j .. 16j + 15) maps its largest-magnitude value
  // to -32; the int8 scales are rounded away from zero so that no value is clamped.
  float want[16], max_abs = 0;
  for (int j = 0; j < 16; ++j) {
    want[j] = signed_absmax(x + 16 * j, 16) / -32.0f;
    max_abs = std::max(max_abs, std::fabs(want[j]));
  }
  const float d = store_f16(b + 208, max_abs / 127.0f, blk, "Q6_K");
  float step[16];
  for (int j = 0; j < 16; ++j) {
    int s = d > 0 ? std::min(127, static_cast<int>(std::ceil(std::fabs(want[j]) / d))) : 0;
    if (want[j] < 0) s = -s;
    b[192 + j] = static_cast<uint8_t>(static_cast<int8_t>(s));
    step[j] = d * static_cast<float>(s);
  }
  std::memset(b, 0, 192);
  for (int i = 0; i < 256; ++i) {
    const Q6Pos p = q6_pos(i);
    const float st = step[i / 16];
    const int q = st != 0 ? round_clamp(x[i] / st, -32, 31) + 32 : 32;
    b[p.ql] |= static_cast<uint8_t>((q & 0xF) << p.shift_l);
    b[128 + p.qh] |= static_cast<uint8_t>((q >> 4) << p.shift_h);
  }
}

using DeqFn = void (*)(const uint8_t*, float*);
using QFn = void (*)(const float*, uint8_t*, int64_t);  // nullptr: no quantizer
struct Codec {
  GgmlType type;
  DeqFn deq;
  QFn q;
};
constexpr Codec kCodecs[] = {
    {GgmlType::Q4_0, deq_q4_0, q_q4_0}, {GgmlType::Q4_1, deq_q4_1, q_q4_1}, {GgmlType::Q5_0, deq_q5_0, q_q5_0},
    {GgmlType::Q5_1, deq_q5_1, q_q5_1}, {GgmlType::Q8_0, deq_q8_0, q_q8_0}, {GgmlType::Q4_K, deq_q4_k, q_q4_k},
    {GgmlType::Q5_K, deq_q5_k, q_q5_k}, {GgmlType::Q6_K, deq_q6_k, q_q6_k}, {GgmlType::Q2_K, deq_q2_k, nullptr},
    {GgmlType::Q3_K, deq_q3_k, nullptr},
};
const Codec* codec(GgmlType t) {
  for (const auto& c : kCodecs)
    if (c.type == t) return &c;
  return nullptr;
}

int64_t whole_blocks(const GgmlTypeInfo& info, int64_t n, const char* verb) {
  if (n < 0 || n % info.block_elements != 0)
    throw Error(std::string(verb) + " " + info.name + ": " + std::to_string(n) + " values are not a whole number of " +
                std::to_string(info.block_elements) + "-value blocks");
  return n / info.block_elements;
}

}  // namespace

void k_block_ints(GgmlType type, const uint8_t* block, uint8_t* q, int* sc, int* mn) {
  if (type == GgmlType::Q6_K) {
    for (int i = 0; i < 256; ++i) {
      const Q6Pos p = q6_pos(i);
      q[i] = static_cast<uint8_t>(((block[p.ql] >> p.shift_l) & 0xF) | (((block[128 + p.qh] >> p.shift_h) & 3) << 4));
    }
    for (int j = 0; j < 16; ++j) sc[j] = static_cast<int8_t>(block[192 + j]);
    return;
  }
  if (type != GgmlType::Q4_K && type != GgmlType::Q5_K)
    throw Error(std::string("k_block_ints: ") + ggml_type_info(type).name + " is not Q4_K, Q5_K or Q6_K");
  const bool five = type == GgmlType::Q5_K;
  const uint8_t* qh = block + 16;
  const uint8_t* qs = five ? block + 48 : block + 16;
  for (int s = 0; s < 8; ++s) {
    get_scale_min(block + 4, s, &sc[s], &mn[s]);
    for (int l = 0; l < 32; ++l) {
      int v = k_low(qs, s, l);
      if (five) v |= ((qh[l] >> s) & 1) << 4;
      q[32 * s + l] = static_cast<uint8_t>(v);
    }
  }
}

void dequantize(GgmlType type, const uint8_t* src, float* dst, int64_t n) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  if (!info.dequantize)
    throw Error(std::string("rlx cannot dequantize ggml type ") + info.name + " (it can: " + codec_names(false) + ")");
  const int64_t blocks = whole_blocks(info, n, "dequantize");
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = load_f16(src + 2 * i);
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_bits_to_f32(h);
      }
      return;
    case GgmlType::F64:
      for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, src + 8 * i, 8);
        dst[i] = static_cast<float>(v);
      }
      return;
    default: break;
  }
  const Codec* c = codec(type);
  if (!c) throw Error(std::string("dequantize: no codec for ") + info.name);
  for (int64_t k = 0; k < blocks; ++k) c->deq(src + k * info.block_bytes, dst + k * info.block_elements);
}

void quantize(GgmlType type, const float* src, uint8_t* dst, int64_t n) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  if (!info.quantize)
    throw Error(std::string("rlx cannot quantize to ggml type ") + info.name + " (it can: " + codec_names(true) + ")");
  const int64_t blocks = whole_blocks(info, n, "quantize");
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(src[i]))
      throw Error(std::string("quantize ") + info.name + ": value " + std::to_string(i) + " is " +
                  (std::isnan(src[i]) ? "NaN" : "infinite") + "; only finite values can be quantized");
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case GgmlType::F16:
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const bool f16 = type == GgmlType::F16;
        const uint16_t h = f16 ? f32_to_f16_bits(src[i]) : f32_to_bf16_bits(src[i]);
        if (!std::isfinite(f16 ? f16_bits_to_f32(h) : bf16_bits_to_f32(h)))
          throw Error(std::string("quantize ") + info.name + ": value " + std::to_string(i) + " (" +
                      std::to_string(src[i]) + ") is beyond the " + (f16 ? "f16" : "bf16") +
                      " range (it would become infinite); keep this tensor in a wider type (e.g. --scheme bf16 / f32)");
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    default: break;
  }
  const Codec* c = codec(type);
  if (!c || !c->q) throw Error(std::string("quantize: no codec for ") + info.name);
  for (int64_t k = 0; k < blocks; ++k) c->q(src + k * info.block_elements, dst + k * info.block_bytes, k);
}

namespace {
constexpr std::pair<QuantFormat, GgmlType> kFormats[] = {
    {QuantFormat::Q4_0, GgmlType::Q4_0}, {QuantFormat::Q4_1, GgmlType::Q4_1}, {QuantFormat::Q5_0, GgmlType::Q5_0},
    {QuantFormat::Q5_1, GgmlType::Q5_1}, {QuantFormat::Q8_0, GgmlType::Q8_0}, {QuantFormat::Q2_K, GgmlType::Q2_K},
    {QuantFormat::Q3_K, GgmlType::Q3_K}, {QuantFormat::Q4_K, GgmlType::Q4_K}, {QuantFormat::Q5_K, GgmlType::Q5_K},
    {QuantFormat::Q6_K, GgmlType::Q6_K}, {QuantFormat::F16, GgmlType::F16},   {QuantFormat::BF16, GgmlType::BF16},
};
}  // namespace

GgmlType ggml_type_of(QuantFormat f) {
  for (const auto& [q, t] : kFormats)
    if (q == f) return t;
  throw Error("unknown quant format " + std::to_string(static_cast<int>(f)));
}

std::optional<QuantFormat> quant_format_of(GgmlType t) {
  for (const auto& [q, g] : kFormats)
    if (g == t) return q;
  return std::nullopt;
}

}  // namespace quant

std::vector<float> ggml_dequantize(GgmlType type, std::span<const uint8_t> bytes) {
  return translate_errors("ggml_dequantize", [&] {
    const GgmlTypeInfo& info = ggml_type_info(type);
    if (bytes.size() % static_cast<size_t>(info.block_bytes) != 0)
      throw Error(std::string("ggml_dequantize ") + info.name + ": " + std::to_string(bytes.size()) +
                  " bytes are not a whole number of " + std::to_string(info.block_bytes) + "-byte blocks");
    const auto blocks = static_cast<int64_t>(bytes.size()) / info.block_bytes;
    std::vector<float> out(static_cast<size_t>(blocks * info.block_elements));
    quant::dequantize(type, bytes.data(), out.data(), static_cast<int64_t>(out.size()));
    return out;
  });
}

std::vector<uint8_t> ggml_quantize(GgmlType type, std::span<const float> values) {
  return translate_errors("ggml_quantize", [&] {
    const auto n = static_cast<int64_t>(values.size());
    std::vector<uint8_t> out(static_cast<size_t>(ggml_nbytes(type, n, "ggml_quantize")));
    quant::quantize(type, values.data(), out.data(), n);
    return out;
  });
}

}  // namespace rlx
