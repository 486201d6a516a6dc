// The Int8 DequantMatMul kernels (quant_matmul.h): AVX2 integer dot products of unpacked weight
// blocks with 8-bit quantized x. Every function here is compiled for AVX2 + FMA + F16C (the
// target pragma below; clang's attribute pragma for the clang builds) and is only called after quant_matmul.cpp checked the CPU runs them. The
// code between the pragmas uses no standard-library templates, so no AVX2 copy of a shared inline
// function can leak into the rest of the program.
#include <cstdint>
#include <cstring>

#include "backends/cpu/quant_matmul.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

namespace rlx::cpu::avx2 {
namespace {

#define RLX_QINLINE inline __attribute__((always_inline))

RLX_QINLINE float h2f(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
RLX_QINLINE __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
RLX_QINLINE __m256i load32(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
// 16 bytes of nibbles -> 32 bytes: the low nibbles, then the high nibbles.
// (The 16 bytes loaded into both lanes, the high lane shifted right by 4: two ALU operations.)
RLX_QINLINE __m256i nibbles16(const uint8_t* p) {
  const __m256i raw = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_and_si256(_mm256_srlv_epi64(raw, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0F));
}
// Bit j of `bits` -> 0x10 in byte j (the fifth bit of Q5_0 / Q5_1 value j).
RLX_QINLINE __m256i bit4_bytes(uint32_t bits) {
  const __m256i pick = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), pick);  // byte j = bits byte j/8
  const __m256i mask = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));  // bit j%8 of byte j
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(v, mask), mask);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}
// Sum over 4-byte groups of u (unsigned) * s (signed): 8 x i32.
RLX_QINLINE __m256i dot_u8_i8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
RLX_QINLINE float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Accumulators of up to 4 x rows (32-value blocks) against one weight row: a vector part (integer dots times their
// scales) and a scalar part (the per-block offsets times the x block sums).
template <int R> struct Acc {
  const XBlock* const* xr;
  __m256 v[R];
  float s[R];
  RLX_QINLINE explicit Acc(const XBlock* const* x) : xr(x) {
    for (int r = 0; r < R; ++r) {
      v[r] = _mm256_setzero_ps();
      s[r] = 0.0f;
    }
  }
  // Unsigned weight values q of x block u: adds ws * dot(q, xq) + wm * sum(xq), each times x's scale.
  RLX_QINLINE void add(__m256i q, float ws, float wm, int64_t u) {
    for (int r = 0; r < R; ++r) {
      const XBlock& xb = xr[r][u];
      const __m256i isum = dot_u8_i8(q, load32(xb.q));
      v[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(ws * xb.d), v[r]);
      s[r] += wm * xb.dsum;
    }
  }
  // Signed weight values (Q8_0).
  RLX_QINLINE void add_signed(__m256i q, float ws, int64_t u) {
    const __m256i qa = _mm256_sign_epi8(q, q);
    for (int r = 0; r < R; ++r) {
      const XBlock& xb = xr[r][u];
      const __m256i isum = dot_u8_i8(qa, _mm256_sign_epi8(load32(xb.q), q));
      v[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(ws * xb.d), v[r]);
    }
  }
  RLX_QINLINE void store(float* out, int64_t ld) const {
    for (int r = 0; r < R; ++r) out[r * ld] = hsum(v[r]) + s[r];
  }
};

// K-quant 6-bit sub-block scales and mins (ggml_blocks.h), on three 32-bit words of the 12 bytes:
// scales 0..3 are the low 6 bits of bytes 0..3, mins 0..3 of bytes 4..7; scale / min 4 + j has
// its low 4 bits in the low / high nibble of byte 8 + j and its high 2 bits in bits 6..7 of byte
// j / 4 + j. sc[j] and mn[j] come back as byte j of the two 64-bit words.
RLX_QINLINE void kscales64(const uint8_t* s, uint64_t& sc, uint64_t& mn) {
  uint32_t a, b, c;
  std::memcpy(&a, s, 4);
  std::memcpy(&b, s + 4, 4);
  std::memcpy(&c, s + 8, 4);
  const uint32_t lo6 = 0x3F3F3F3Fu, lo4 = 0x0F0F0F0Fu, lo2 = 0x03030303u;
  sc = uint64_t{a & lo6} | uint64_t{(c & lo4) | (((a >> 6) & lo2) << 4)} << 32;
  mn = uint64_t{b & lo6} | uint64_t{((c >> 4) & lo4) | (((b >> 6) & lo2) << 4)} << 32;
}
RLX_QINLINE void kscales(const uint8_t* s, uint8_t* sc, uint8_t* mn) {
  uint64_t a, b;
  kscales64(s, a, b);
  std::memcpy(sc, &a, 8);
  std::memcpy(mn, &b, 8);
}

// Q4_K / Q5_K chunk c (values 64c .. 64c + 63 of a superblock): sub-block 2c in lo, 2c + 1 in hi.
template <bool k5>
RLX_QINLINE void unpack_k45(const uint8_t* qs, __m256i qh, int c, __m256i& lo, __m256i& hi) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i raw = load32(qs + 32 * c);
  lo = _mm256_and_si256(raw, low4);
  hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
  if constexpr (k5) {
    const __m256i m0 = _mm256_set1_epi8(static_cast<char>(1 << (2 * c)));
    const __m256i m1 = _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 1)));
    const __m256i b4 = _mm256_set1_epi8(0x10);
    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, m0), m0), b4));
    hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, m1), m1), b4));
  } else {
    (void)qh;
  }
}
// Q6_K values 128h + 32k .. + 31 of the superblock at p (unsigned, 0..63).
RLX_QINLINE __m256i unpack_q6(const uint8_t* p, int h, int k) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i qh = load32(p + 128 + 32 * h);
  const __m256i raw = load32(p + 64 * h + 32 * (k & 1));
  const __m256i lo = (k >> 1) ? _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4) : _mm256_and_si256(raw, low4);
  const __m256i hi2 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), _mm256_set1_epi8(0x03));
  return _mm256_or_si256(lo, _mm256_slli_epi16(hi2, 4));
}

// Unpacks the `blocks` blocks of one weight row into 32-value units u = 0, 1, ... and hands each
// to the sink: a.add(q, ws, wm, u) for unsigned q (value = ws * q + wm), a.add_signed(q, ws, u)
// for Q8_0 (value = ws * q), a.add_q6(q, d, sc_lo, sc_hi, u) for Q6_K (value = d * sc * (q - 32),
// sc_lo on values 0..15 and sc_hi on 16..31).
// The 32-value formats: bytes per block, and block p unpacked to unsigned values q (value =
// ws * q + wm) or, for Q8_0, signed values (value = ws * q, wm unused).
template <QuantFormat F> inline constexpr int64_t kBlockBytes =
    F == QuantFormat::Q4_0 ? 18 : F == QuantFormat::Q4_1 ? 20 : F == QuantFormat::Q5_0 ? 22 : F == QuantFormat::Q5_1 ? 24 : 34;
template <QuantFormat F> RLX_QINLINE void unit32(const uint8_t* p, __m256i& q, float& ws, float& wm) {
  if constexpr (F == QuantFormat::Q4_0) {
    ws = h2f(p);
    wm = -8.0f * ws;
    q = nibbles16(p + 2);
  } else if constexpr (F == QuantFormat::Q4_1) {
    ws = h2f(p);
    wm = h2f(p + 2);
    q = nibbles16(p + 4);
  } else if constexpr (F == QuantFormat::Q5_0) {
    ws = h2f(p);
    wm = -16.0f * ws;
    uint32_t qh;
    std::memcpy(&qh, p + 2, 4);
    q = _mm256_or_si256(nibbles16(p + 6), bit4_bytes(qh));
  } else if constexpr (F == QuantFormat::Q5_1) {
    ws = h2f(p);
    wm = h2f(p + 2);
    uint32_t qh;
    std::memcpy(&qh, p + 4, 4);
    q = _mm256_or_si256(nibbles16(p + 8), bit4_bytes(qh));
  } else {
    ws = h2f(p);
    wm = 0.0f;
    q = load32(p + 2);
  }
}

// Unpacks the `blocks` blocks of one weight row into 32-value units u = 0, 1, ... and hands each
// to the sink: a.add(q, ws, wm, u) for unsigned q (value = ws * q + wm), a.add_signed(q, ws, u)
// for Q8_0 (value = ws * q), a.add_q6(q, d, sc_lo, sc_hi, u) for Q6_K (value = d * sc * (q - 32),
// sc_lo on values 0..15 and sc_hi on 16..31).
template <QuantFormat F, class Sink>
RLX_QINLINE void for_units(const uint8_t* w, int64_t blocks, Sink& a) {
  for (int64_t b = 0; b < blocks; ++b) {
    if constexpr (F == QuantFormat::Q4_0 || F == QuantFormat::Q4_1 || F == QuantFormat::Q5_0 || F == QuantFormat::Q5_1) {
      __m256i q;
      float ws, wm;
      unit32<F>(w + kBlockBytes<F> * b, q, ws, wm);
      a.add(q, ws, wm, b);
    } else if constexpr (F == QuantFormat::Q8_0) {
      __m256i q;
      float ws, wm;
      unit32<F>(w + 34 * b, q, ws, wm);
      a.add_signed(q, ws, b);
    } else if constexpr (F == QuantFormat::Q4_K || F == QuantFormat::Q5_K) {
      constexpr bool k5 = F == QuantFormat::Q5_K;
      const uint8_t* p = w + (k5 ? 176 : 144) * b;
      const float d = h2f(p), dmin = h2f(p + 2);
      uint8_t sc[8], mn[8];
      kscales(p + 4, sc, mn);
      const uint8_t* qs = p + (k5 ? 48 : 16);
      const __m256i qh = k5 ? load32(p + 16) : _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        __m256i lo, hi;
        unpack_k45<k5>(qs, qh, c, lo, hi);
        a.add(lo, d * sc[2 * c], -dmin * mn[2 * c], 8 * b + 2 * c);
        a.add(hi, d * sc[2 * c + 1], -dmin * mn[2 * c + 1], 8 * b + 2 * c + 1);
      }
    } else if constexpr (F == QuantFormat::Q6_K) {
      const uint8_t* p = w + 210 * b;
      const float d = h2f(p + 208);
      const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
      for (int h = 0; h < 2; ++h) {
        for (int k = 0; k < 4; ++k) {
          a.add_q6(unpack_q6(p, h, k), d, sc[8 * h + 2 * k], sc[8 * h + 2 * k + 1], 8 * b + 4 * h + k);
        }
      }
    }
  }
}

// One weight row (`blocks` blocks of a 32-value format) against R x rows; results to out[r * ld].
template <QuantFormat F, int R>
void dot_row(const uint8_t* w, int64_t blocks, const XBlock* const* xr, float* out, int64_t ld) {
  Acc<R> a(xr);
  for_units<F>(w, blocks, a);
  a.store(out, ld);
}

// The 16 int16 values mn[0], mn[0], mn[1], mn[1], ..., mn[7] (byte j of mn64 is mn[j]): each
// 32-value sub-block's min against the two 16-value sums of x it covers.
RLX_QINLINE __m256i mins_x2(uint64_t mn64) {
  const __m128i m = _mm_cvtsi64_si128(static_cast<long long>(mn64));
  return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));
}

// One Q4_K / Q5_K / Q6_K superblock p against R x rows (xr[r][b]) quantized in 256-value blocks:
// the sub-block scales are applied in the integer dot (_mm256_madd_epi16 with the scale as the
// second operand), the mins (Q4_K / Q5_K) or the -32 offset (Q6_K) by a madd of the integer
// sub-block scales / mins with x's 16-value sums, so a superblock is converted to f32 once:
// v[r] += d * xd * dot - (dmin or 32 d) * xd * correction.
template <QuantFormat F, int R>
RLX_QINLINE void superblock(const uint8_t* p, const XBlockK* const* xr, int64_t b, __m256* v) {
  __m256i isum[R];
  for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
  float d, dc;     // the block scale, and the scale of the correction
  __m256i cscale;  // 16 int16 correction factors, one per 16 values
  if constexpr (F == QuantFormat::Q4_K || F == QuantFormat::Q5_K) {
    constexpr bool k5 = F == QuantFormat::Q5_K;
    d = h2f(p);
    dc = -h2f(p + 2);
    uint64_t sc, mn;
    kscales64(p + 4, sc, mn);
    cscale = mins_x2(mn);
    // The 8 scales as int16 in both lanes; scale j to every int16 by one byte shuffle.
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(sc))));
    const uint8_t* qs = p + (k5 ? 48 : 16);
    const __m256i qh = k5 ? load32(p + 16) : _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      __m256i lo, hi;
      unpack_k45<k5>(qs, qh, c, lo, hi);
      const __m256i s_lo = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * (2 * c))));
      const __m256i s_hi = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * (2 * c + 1))));
      for (int r = 0; r < R; ++r) {
        const int8_t* xq = xr[r][b].q + 64 * c;
        const __m256i a = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load32(xq)), s_lo);
        const __m256i e = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load32(xq + 32)), s_hi);
        isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(a, e));
      }
    }
  } else {  // Q6_K
    d = h2f(p + 208);
    dc = -32.0f * d;
    const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sc));
    cscale = _mm256_cvtepi8_epi16(sc8);
    // Scales 8h .. 8h + 7 as int16 in both lanes; values 0..15 of unit k take scale 8h + 2k (low
    // lane), 16..31 scale 8h + 2k + 1 (high lane): one byte shuffle each.
    const __m256i half16[2] = {_mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8)),
                               _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_srli_si128(sc8, 8)))};
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 4; ++k) {
        const __m256i q = unpack_q6(p, h, k);
        const __m256i scv = _mm256_shuffle_epi8(
            half16[h], _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(0x0100 + 0x0202 * (2 * k + 1))),
                                        _mm_set1_epi16(static_cast<short>(0x0100 + 0x0202 * (2 * k)))));
        for (int r = 0; r < R; ++r) {
          const int8_t* xq = xr[r][b].q + 128 * h + 32 * k;
          isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(q, load32(xq)), scv));
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const XBlockK& xb = xr[r][b];
    const __m256i corr = _mm256_madd_epi16(cscale, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.bsum)));
    v[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_set1_ps(d * xb.d), v[r]);
    v[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(corr), _mm256_set1_ps(dc * xb.d), v[r]);
  }
}

template <QuantFormat F> inline constexpr int64_t kSuperBytes =
    F == QuantFormat::Q4_K ? 144 : F == QuantFormat::Q5_K ? 176 : 210;

// One K-format weight row against R x rows; results to out[r * ld].
template <QuantFormat F, int R>
void dot_row_k(const uint8_t* w, int64_t blocks, const XBlockK* const* xr, float* out, int64_t ld) {
  __m256 v[R];
  for (int r = 0; r < R; ++r) v[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) superblock<F, R>(w + kSuperBytes<F> * b, xr, b, v);
  for (int r = 0; r < R; ++r) out[r * ld] = hsum(v[r]);
}

// kNR consecutive weight rows (w, w + row_bytes, ...) against one x row: out[j] for j < kNR. The
// rows' accumulations are independent, so the FMA / add latencies of one row overlap the others'
// (decode: the x row stays in registers / L1 while the weights stream).
template <QuantFormat F, int kNR>
void dot_rows_k(const uint8_t* w, int64_t row_bytes, int64_t blocks, const XBlockK* x, float* out) {
  __m256 v[kNR];
  for (int r = 0; r < kNR; ++r) v[r] = _mm256_setzero_ps();
  const XBlockK* const xr[1] = {x};
  for (int64_t b = 0; b < blocks; ++b)
    for (int r = 0; r < kNR; ++r) superblock<F, 1>(w + r * row_bytes + kSuperBytes<F> * b, xr, b, v + r);
  for (int r = 0; r < kNR; ++r) out[r] = hsum(v[r]);
}
// The f16 at p in all 8 lanes as f32.
RLX_QINLINE __m256 h2f8(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(h)));
}

// Block b of a 32-value format against x block xb, added to v: the block's integer dot times
// x's scale, plus x's offset term (Q4_0 / Q5_0: the -8 / -16 zero point times d * sum q, spread
// over the 8 lanes), times the weight scale; Q4_1 / Q5_1 add the weight min times x's block sum
// to vm, in all 8 lanes (so vm holds 8 times the sum). Everything stays in vectors (the f16
// scales are converted in all 8 lanes).
template <QuantFormat F> RLX_QINLINE __m256 block_dot(const uint8_t* p, const XBlock& xb, __m256 v, __m256& vm) {
  constexpr bool kZeroPoint = F == QuantFormat::Q4_0 || F == QuantFormat::Q5_0;
  constexpr bool kMin = F == QuantFormat::Q4_1 || F == QuantFormat::Q5_1;
  __m256i q;
  if constexpr (F == QuantFormat::Q4_0) q = nibbles16(p + 2);
  else if constexpr (F == QuantFormat::Q4_1) q = nibbles16(p + 4);
  else if constexpr (F == QuantFormat::Q8_0) q = load32(p + 2);
  else {
    constexpr int kQh = F == QuantFormat::Q5_0 ? 2 : 4;
    uint32_t qh;
    std::memcpy(&qh, p + kQh, 4);
    q = _mm256_or_si256(nibbles16(p + kQh + 4), bit4_bytes(qh));
  }
  const __m256i xq = load32(xb.q);
  __m256i isum;
  if constexpr (F == QuantFormat::Q8_0) isum = dot_u8_i8(_mm256_sign_epi8(q, q), _mm256_sign_epi8(xq, q));
  else isum = dot_u8_i8(q, xq);
  const __m256 fi = _mm256_cvtepi32_ps(isum), xd = _mm256_set1_ps(xb.d), dsum = _mm256_set1_ps(xb.dsum);
  if constexpr (kZeroPoint) {
    // Q4_0: sum (q - 8) x = d (isum - 8 sum q), so each lane takes -dsum; Q5_0: -2 dsum.
    __m256 t = _mm256_fmsub_ps(fi, xd, dsum);
    if constexpr (F == QuantFormat::Q5_0) t = _mm256_sub_ps(t, dsum);
    v = _mm256_fmadd_ps(t, h2f8(p), v);
  } else {
    v = _mm256_fmadd_ps(_mm256_mul_ps(fi, xd), h2f8(p), v);
  }
  if constexpr (kMin) vm = _mm256_fmadd_ps(dsum, h2f8(p + 2), vm);  // 8 lanes: 8 times the min term
  return v;
}

// kNR consecutive weight rows against one x row (decode), one row after the other: each row is
// one sequential stream (interleaving the rows' blocks made 4 streams of 18-34 byte steps, which
// ran at a third of the speed once the weights come from L3 / DRAM), its blocks summed into 4
// accumulators in turn so that the FMA latencies overlap.
template <QuantFormat F, int kNR>
void dot_rows(const uint8_t* w, int64_t row_bytes, int64_t blocks, const XBlock* x, float* out) {
  for (int r = 0; r < kNR; ++r) {
    const uint8_t* wr = w + r * row_bytes;
    __m256 v0 = _mm256_setzero_ps(), v1 = v0, v2 = v0, v3 = v0, m0 = v0, m1 = v0;
    int64_t b = 0;
    for (; b + 4 <= blocks; b += 4) {
      v0 = block_dot<F>(wr + kBlockBytes<F> * b, x[b], v0, m0);
      v1 = block_dot<F>(wr + kBlockBytes<F> * (b + 1), x[b + 1], v1, m1);
      v2 = block_dot<F>(wr + kBlockBytes<F> * (b + 2), x[b + 2], v2, m0);
      v3 = block_dot<F>(wr + kBlockBytes<F> * (b + 3), x[b + 3], v3, m1);
    }
    for (; b < blocks; ++b) v0 = block_dot<F>(wr + kBlockBytes<F> * b, x[b], v0, m0);
    v0 = _mm256_fmadd_ps(_mm256_add_ps(m0, m1), _mm256_set1_ps(0.125f), v0);
    out[r] = hsum(_mm256_add_ps(_mm256_add_ps(v0, v1), _mm256_add_ps(v2, v3)));
  }
}

// Weight rows [n0, n1) against the x rows, in tiles of kMTile x rows that stay in cache while the
// weight rows pass over them, and groups of 4 weight rows that stay in L1 while the tile's x rows
// pass over them: four x rows per pass over a weight row (Dot4); the x rows left over (all of them
// at decode, M < 4) one at a time against the 4 weight rows at once (DotW4), else one by one (Dot1).
template <class XB, int64_t kMTile, auto Dot4, auto Dot1, auto DotW4>
void tile_rows(const XB* xq, int64_t m, int64_t blocks, const uint8_t* w, int64_t row_bytes, int64_t n0, int64_t n1,
               float* y, int64_t ldy) {
  for (int64_t m0 = 0; m0 < m; m0 += kMTile) {
    const int64_t m1 = m0 + kMTile < m ? m0 + kMTile : m;
    for (int64_t j0 = n0; j0 < n1; j0 += 4) {
      const int64_t j1 = j0 + 4 < n1 ? j0 + 4 : n1;
      int64_t i = m0;
      for (; i + 4 <= m1; i += 4) {
        const XB* xr[4] = {xq + i * blocks, xq + (i + 1) * blocks, xq + (i + 2) * blocks, xq + (i + 3) * blocks};
        for (int64_t j = j0; j < j1; ++j) Dot4(w + j * row_bytes, blocks, xr, y + i * ldy + j, ldy);
      }
      for (; i < m1; ++i) {
        if (j1 - j0 == 4) {
          DotW4(w + j0 * row_bytes, row_bytes, blocks, xq + i * blocks, y + i * ldy + j0);
          continue;
        }
        const XB* xr[1] = {xq + i * blocks};
        for (int64_t j = j0; j < j1; ++j) Dot1(w + j * row_bytes, blocks, xr, y + i * ldy + j, ldy);
      }
    }
  }
}

// The K formats: x in 256-value blocks, 16 rows a tile (the bytes of 32 rows of XBlock).
template <QuantFormat F> void rows_of_k(const XBlockK* xq, int64_t m, int64_t k, const uint8_t* w, int64_t row_bytes,
                                        int64_t n0, int64_t n1, float* y, int64_t ldy) {
  tile_rows<XBlockK, 16, dot_row_k<F, 4>, dot_row_k<F, 1>, dot_rows_k<F, 4>>(xq, m, k / 256, w, row_bytes, n0, n1, y,
                                                                            ldy);
}

// Writes the f32 values of the units to out[32 u ..].
struct F32Sink {
  float* out;
  RLX_QINLINE void put8(__m256i q32, float ws, float wm, float* o) {
    _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_cvtepi32_ps(q32), _mm256_set1_ps(ws), _mm256_set1_ps(wm)));
  }
  RLX_QINLINE void add(__m256i q, float ws, float wm, int64_t u) {
    float* o = out + 32 * u;
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    put8(_mm256_cvtepu8_epi32(lo), ws, wm, o);
    put8(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)), ws, wm, o + 8);
    put8(_mm256_cvtepu8_epi32(hi), ws, wm, o + 16);
    put8(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)), ws, wm, o + 24);
  }
  RLX_QINLINE void add_signed(__m256i q, float ws, int64_t u) {
    float* o = out + 32 * u;
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    put8(_mm256_cvtepi8_epi32(lo), ws, 0.0f, o);
    put8(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)), ws, 0.0f, o + 8);
    put8(_mm256_cvtepi8_epi32(hi), ws, 0.0f, o + 16);
    put8(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)), ws, 0.0f, o + 24);
  }
  RLX_QINLINE void add_q6(__m256i q, float d, int sc_lo, int sc_hi, int64_t u) {
    float* o = out + 32 * u;
    const float a = d * static_cast<float>(sc_lo), b = d * static_cast<float>(sc_hi);
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    put8(_mm256_cvtepu8_epi32(lo), a, -32.0f * a, o);
    put8(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)), a, -32.0f * a, o + 8);
    put8(_mm256_cvtepu8_epi32(hi), b, -32.0f * b, o + 16);
    put8(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)), b, -32.0f * b, o + 24);
  }
};

template <QuantFormat F> void decode_of(const uint8_t* w, int64_t row_bytes, int64_t rows, int64_t k, float* out) {
  constexpr int64_t elems = (F == QuantFormat::Q4_K || F == QuantFormat::Q5_K || F == QuantFormat::Q6_K) ? 256 : 32;
  for (int64_t j = 0; j < rows; ++j) {
    F32Sink s{out + j * k};
    for_units<F>(w + j * row_bytes, k / elems, s);
  }
}

// The 32-value formats (Q4_0 .. Q8_0): weight blocks and x blocks coincide; 32 x rows a tile.
template <QuantFormat F> void rows_of(const XBlock* xq, int64_t m, int64_t k, const uint8_t* w, int64_t row_bytes,
                                      int64_t n0, int64_t n1, float* y, int64_t ldy) {
  tile_rows<XBlock, 32, dot_row<F, 4>, dot_row<F, 1>, dot_rows<F, 4>>(xq, m, k / 32, w, row_bytes, n0, n1, y, ldy);
}

// ---- Int8Gemm (prefill): 8 weight rows a tile, x rows quantized to 32-value blocks -----------
// The tile holds, per 32-value unit u of the rows, 8 vectors c = 0..7 whose 32-bit lane r is
// values 4c .. 4c + 3 of row r (unsigned), then the units' weight scales ws[u][r] and offsets
// wm[u][r] (value = ws * q + wm). A vector of x's values 4c .. 4c + 3 broadcast to every lane
// then gives, by one _mm256_maddubs_epi16, partial dots of all 8 rows at once: the lanes of the
// accumulator are the 8 output columns, so no horizontal sums are needed.
struct TileSink {
  uint8_t* q;  // units x 256 bytes
  float* ws;   // units x 8
  float* wm;   // units x 8
  int r;       // the row of the tile
  RLX_QINLINE void add(__m256i v, float s, float m, int64_t u) {
    alignas(32) uint32_t words[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(words), v);
    uint8_t* dst = q + 256 * u + 4 * r;
    for (int c = 0; c < 8; ++c) std::memcpy(dst + 32 * c, &words[c], 4);
    ws[8 * u + r] = s;
    wm[8 * u + r] = m;
  }
};

// Fills the tile of weight rows [j0, j0 + rows) (rows <= 8; the others zero) of `units` units.
template <QuantFormat F>
void fill_tile(const uint8_t* w, int64_t row_bytes, int64_t j0, int64_t rows, int64_t units, uint8_t* q, float* ws,
               float* wm) {
  constexpr int64_t per_block = (F == QuantFormat::Q4_K || F == QuantFormat::Q5_K) ? 8 : 1;  // units a block
  for (int r = 0; r < 8; ++r) {
    if (r < rows) {
      TileSink sink{q, ws, wm, r};
      for_units<F>(w + (j0 + r) * row_bytes, units / per_block, sink);
      continue;
    }
    for (int64_t u = 0; u < units; ++u) {
      for (int c = 0; c < 8; ++c) std::memset(q + 256 * u + 32 * c + 4 * r, 0, 4);
      ws[8 * u + r] = 0.0f;
      wm[8 * u + r] = 0.0f;
    }
  }
}

// R x rows (xr[i], 32-value blocks) against the tile: out[i * ldy + 0..7] (the first `cols`).
// 4-bit weights sum 8 maddubs results in 16 bits (8 x 2 x 15 x 127 < 2^15), 5-bit ones 4.
template <int R, bool k5bit>
RLX_QINLINE void tile_dot(const uint8_t* q, const float* ws, const float* wm, int64_t units, const XBlock* const* xr,
                          float* out, int64_t ldy, int64_t cols) {
  __m256 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t u = 0; u < units; ++u) {
    __m256i isum[R];
    for (int i = 0; i < R; ++i) isum[i] = _mm256_setzero_si256();
    for (int h = 0; h < (k5bit ? 2 : 1); ++h) {
      __m256i s16[R];
      for (int i = 0; i < R; ++i) s16[i] = _mm256_setzero_si256();
      for (int c = h * (k5bit ? 4 : 8); c < (h + 1) * (k5bit ? 4 : 8); ++c) {
        const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 256 * u + 32 * c));
        for (int i = 0; i < R; ++i) {
          int32_t x4;
          std::memcpy(&x4, xr[i][u].q + 4 * c, 4);
          s16[i] = _mm256_add_epi16(s16[i], _mm256_maddubs_epi16(wv, _mm256_set1_epi32(x4)));
        }
      }
      for (int i = 0; i < R; ++i) isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(s16[i], ones));
    }
    const __m256 sv = _mm256_load_ps(ws + 8 * u), mv = _mm256_load_ps(wm + 8 * u);
    for (int i = 0; i < R; ++i) {
      const XBlock& xb = xr[i][u];
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_mul_ps(sv, _mm256_set1_ps(xb.d)), acc[i]);
      acc[i] = _mm256_fmadd_ps(mv, _mm256_set1_ps(xb.dsum), acc[i]);
    }
  }
  for (int i = 0; i < R; ++i) {
    if (cols == 8) {
      _mm256_storeu_ps(out + i * ldy, acc[i]);
    } else {
      alignas(32) float t[8];
      _mm256_store_ps(t, acc[i]);
      for (int64_t c = 0; c < cols; ++c) out[i * ldy + c] = t[c];
    }
  }
}

template <QuantFormat F>
void gemm_of(const XBlock* xq, int64_t m, int64_t k, const uint8_t* w, int64_t row_bytes, int64_t n0, int64_t n1,
             float* y, int64_t ldy, uint8_t* scratch) {
  constexpr bool k5 = F == QuantFormat::Q5_0 || F == QuantFormat::Q5_1 || F == QuantFormat::Q5_K;
  const int64_t units = k / 32;
  uint8_t* q = scratch;
  auto* ws = reinterpret_cast<float*>(scratch + 256 * units);
  float* wm = ws + 8 * units;
  for (int64_t j0 = n0; j0 < n1; j0 += 8) {
    const int64_t cols = n1 - j0 < 8 ? n1 - j0 : 8;
    fill_tile<F>(w, row_bytes, j0, cols, units, q, ws, wm);
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
      const XBlock* xr[4] = {xq + i * units, xq + (i + 1) * units, xq + (i + 2) * units, xq + (i + 3) * units};
      tile_dot<4, k5>(q, ws, wm, units, xr, y + i * ldy + j0, ldy, cols);
    }
    for (; i < m; ++i) {
      const XBlock* xr[1] = {xq + i * units};
      tile_dot<1, k5>(q, ws, wm, units, xr, y + i * ldy + j0, ldy, cols);
    }
  }
}

// ---- x quantization (quantize_x_row / quantize_x_row_k on vector lanes) -----------------------
// max |v| over 8n values, or false when one is not finite (the caller's scalar code handles that).
RLX_QINLINE bool absmax(const float* v, int n8, float& amax) {
  const __m256 sign = _mm256_set1_ps(-0.0f), big = _mm256_set1_ps(3.402823466e38f);
  __m256 mx = _mm256_setzero_ps();
  int bad = 0;
  for (int i = 0; i < n8; ++i) {
    const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(v + 8 * i));
    bad |= _mm256_movemask_ps(_mm256_cmp_ps(a, big, _CMP_NLE_UQ));  // inf or NaN
    mx = _mm256_max_ps(mx, a);
  }
  if (bad) return false;
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  amax = _mm_cvtss_f32(m);
  return true;
}
// 8 values times inv, rounded to nearest even (the default rounding mode, as std::nearbyint),
// clamped to [-127, 127].
RLX_QINLINE __m256i round8(const float* v, __m256 inv) {
  const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v), inv));
  return _mm256_min_epi32(_mm256_max_epi32(q, _mm256_set1_epi32(-127)), _mm256_set1_epi32(127));
}
RLX_QINLINE int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}
// 32 values quantized with inv to q[0..32); sums of the two halves.
RLX_QINLINE void round32(const float* v, __m256 inv, int8_t* q, int& s0, int& s1) {
  const __m256i a = round8(v, inv), b = round8(v + 8, inv), c = round8(v + 16, inv), d = round8(v + 24, inv);
  const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  s0 = hsum_i32(_mm256_add_epi32(a, b));
  s1 = hsum_i32(_mm256_add_epi32(c, d));
}

}  // namespace

bool quantize32(const float* v, XBlock& o) {
  float amax;
  if (!absmax(v, 4, amax)) return false;
  o.d = amax / 127.0f;
  const __m256 inv = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
  int s0, s1;
  round32(v, inv, o.q, s0, s1);
  o.sum[0] = static_cast<int16_t>(s0);
  o.sum[1] = static_cast<int16_t>(s1);
  o.dsum = o.d * static_cast<float>(s0 + s1);
  return true;
}

bool quantize256(const float* v, XBlockK& o) {
  float amax;
  if (!absmax(v, 32, amax)) return false;
  o.d = amax / 127.0f;
  const __m256 inv = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
  for (int u = 0; u < 8; ++u) {
    int s0, s1;
    round32(v + 32 * u, inv, o.q + 32 * u, s0, s1);
    o.bsum[2 * u] = static_cast<int16_t>(s0);
    o.bsum[2 * u + 1] = static_cast<int16_t>(s1);
    o.usum[u] = static_cast<int16_t>(s0 + s1);
  }
  return true;
}

void decode_rows(QuantFormat f, const uint8_t* w, int64_t row_bytes, int64_t rows, int64_t k, float* out) {
  switch (f) {
    case QuantFormat::Q4_0: return decode_of<QuantFormat::Q4_0>(w, row_bytes, rows, k, out);
    case QuantFormat::Q4_1: return decode_of<QuantFormat::Q4_1>(w, row_bytes, rows, k, out);
    case QuantFormat::Q5_0: return decode_of<QuantFormat::Q5_0>(w, row_bytes, rows, k, out);
    case QuantFormat::Q5_1: return decode_of<QuantFormat::Q5_1>(w, row_bytes, rows, k, out);
    case QuantFormat::Q8_0: return decode_of<QuantFormat::Q8_0>(w, row_bytes, rows, k, out);
    case QuantFormat::Q4_K: return decode_of<QuantFormat::Q4_K>(w, row_bytes, rows, k, out);
    case QuantFormat::Q5_K: return decode_of<QuantFormat::Q5_K>(w, row_bytes, rows, k, out);
    case QuantFormat::Q6_K: return decode_of<QuantFormat::Q6_K>(w, row_bytes, rows, k, out);
    case QuantFormat::F16:
    case QuantFormat::BF16: return decode_half_rows(f, w, row_bytes, rows, k, out);
    case QuantFormat::Q2_K:
    case QuantFormat::Q3_K: return;  // not native
  }
}

void int8_rows_k(QuantFormat f, const XBlockK* xq, int64_t m, int64_t k, const uint8_t* w, int64_t row_bytes,
                 int64_t n0, int64_t n1, float* y, int64_t ldy) {
  switch (f) {
    case QuantFormat::Q4_K: return rows_of_k<QuantFormat::Q4_K>(xq, m, k, w, row_bytes, n0, n1, y, ldy);
    case QuantFormat::Q5_K: return rows_of_k<QuantFormat::Q5_K>(xq, m, k, w, row_bytes, n0, n1, y, ldy);
    case QuantFormat::Q6_K: return rows_of_k<QuantFormat::Q6_K>(xq, m, k, w, row_bytes, n0, n1, y, ldy);
    default: return;  // the 32-value formats use int8_rows
  }
}

void int8_gemm(QuantFormat f, const XBlock* xq, int64_t m, int64_t k, const uint8_t* w, int64_t row_bytes, int64_t n0,
               int64_t n1, float* y, int64_t ldy, uint8_t* scratch) {
  switch (f) {
    case QuantFormat::Q4_0: return gemm_of<QuantFormat::Q4_0>(xq, m, k, w, row_bytes, n0, n1, y, ldy, scratch);
    case QuantFormat::Q4_1: return gemm_of<QuantFormat::Q4_1>(xq, m, k, w, row_bytes, n0, n1, y, ldy, scratch);
    case QuantFormat::Q5_0: return gemm_of<QuantFormat::Q5_0>(xq, m, k, w, row_bytes, n0, n1, y, ldy, scratch);
    case QuantFormat::Q5_1: return gemm_of<QuantFormat::Q5_1>(xq, m, k, w, row_bytes, n0, n1, y, ldy, scratch);
    case QuantFormat::Q4_K: return gemm_of<QuantFormat::Q4_K>(xq, m, k, w, row_bytes, n0, n1, y, ldy, scratch);
    case QuantFormat::Q5_K: return gemm_of<QuantFormat::Q5_K>(xq, m, k, w, row_bytes, n0, n1, y, ldy, scratch);
    default: return;  // not an Int8Gemm format (int8_gemm_format)
  }
}

void int8_rows(QuantFormat f, const XBlock* xq, int64_t m, int64_t k, const uint8_t* w, int64_t row_bytes, int64_t n0,
               int64_t n1, float* y, int64_t ldy) {
  switch (f) {
    case QuantFormat::Q4_0: return rows_of<QuantFormat::Q4_0>(xq, m, k, w, row_bytes, n0, n1, y, ldy);
    case QuantFormat::Q4_1: return rows_of<QuantFormat::Q4_1>(xq, m, k, w, row_bytes, n0, n1, y, ldy);
    case QuantFormat::Q5_0: return rows_of<QuantFormat::Q5_0>(xq, m, k, w, row_bytes, n0, n1, y, ldy);
    case QuantFormat::Q5_1: return rows_of<QuantFormat::Q5_1>(xq, m, k, w, row_bytes, n0, n1, y, ldy);
    case QuantFormat::Q8_0: return rows_of<QuantFormat::Q8_0>(xq, m, k, w, row_bytes, n0, n1, y, ldy);
    default: return;  // the K formats use int8_rows_k; Q2_K / Q3_K are not native
  }
}

}  // namespace rlx::cpu::avx2

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else

namespace rlx::cpu::avx2 {
void int8_rows(QuantFormat, const XBlock*, int64_t, int64_t, const uint8_t*, int64_t, int64_t, int64_t, float*, int64_t) {}
void int8_gemm(QuantFormat, const XBlock*, int64_t, int64_t, const uint8_t*, int64_t, int64_t, int64_t, float*, int64_t,
               uint8_t*) {}
void decode_rows(QuantFormat, const uint8_t*, int64_t, int64_t, int64_t, float*) {}
void int8_rows_k(QuantFormat, const XBlockK*, int64_t, int64_t, const uint8_t*, int64_t, int64_t, int64_t, float*, int64_t) {}
bool quantize32(const float*, XBlock&) { return false; }
bool quantize256(const float*, XBlockK&) { return false; }
}  // namespace rlx::cpu::avx2

#endif
