#pragma once
// Conversions of the storage-only dtypes (rlx/dtype.h): the float8 formats, float4 e2m1 and
// the sub-byte integers. In memory each element is one byte: a float format's bits in the low
// bits; a sub-byte integer's value (i4/i2 as a sign-extended int8, u4/u2 as a uint8).
//
// The formats (bias b; "max" the largest finite magnitude):
//   f8e4m3fn    1.4.3, b 7,  max 448,   no inf, NaN S.1111.111, -0
//   f8e4m3fnuz  1.4.3, b 8,  max 240,   no inf, NaN 0x80 only, no -0
//   f8e5m2      1.5.2, b 15, max 57344, inf S.11111.00, NaN S.11111.{01,10,11}, -0
//   f8e5m2fnuz  1.5.2, b 16, max 57344, no inf, NaN 0x80 only, no -0
//   f8e8m0      0.8.0, 2^(bits - 127), no zero, no sign, NaN 0xFF
//   f4e2m1      1.2.1, b 1,  max 6,     no inf, no NaN, -0
//
// Rules (ONNX Cast, opset 25):
//   - to f8 (not e8m0) and f4: round to nearest, ties to even. With saturate (the default),
//     +-inf and finite values that round beyond max become +-max; without, they become inf
//     (e5m2) or NaN (the others; -NaN keeps its sign where the format has one). f4 always
//     saturates. NaN stays NaN (e5m2: S.11111.10, e4m3fn: S.1111.111, fnuz: 0x80); f4 has no
//     NaN: a NaN becomes 0x8 (-0), as the ONNX reference implementation and its test data do
//     (the Cast spec's table says 6). -0 stays -0 where the format has it, else 0.
//   - to e8m0: by the round mode (up: the next power of two away from zero, down: toward zero,
//     nearest: the nearer one, ties up); saturate clamps to [2^-127, 2^127], else values
//     beyond (and 0, inf) become NaN. The sign is ignored (negative inputs are unspecified).
//   - to i4/u4/i2/u2: from an integer, the low bits (two's complement wrap, like every other
//     integer narrowing); from a float, rounded to the nearest integer (ties to even) first
//     (NaN -> 0, beyond int64 clamped to it), then wrapped.
//   - from these dtypes: exact values (every format's values are exact in f32 and f64),
//     converted to the target like any float (or integer) source: to an integer, truncation
//     toward zero with saturation (NaN -> 0); to bool, x != 0.
#include <cstdint>

#include "rlx/dtype.h"

namespace rlx {

enum class E8M0Round : uint8_t { Up, Down, Nearest };

struct NarrowCast {
  bool saturate = true;
  E8M0Round round = E8M0Round::Up;
};

// The exact value of the bits of a narrow float dtype (NaN for its NaN codes).
double narrow_float_value(DType t, uint8_t bits);
// v as a narrow float dtype's bits, by the rules above.
uint8_t narrow_float_bits(DType t, double v, NarrowCast o = {});
// e8m0 bits of an integer magnitude (exact for every int64/uint64, which a double may round).
uint8_t e8m0_bits_from_uint(uint64_t magnitude, NarrowCast o = {});
// Integer -> i4/u4/i2/u2 (the low bits; the stored byte). Float -> these: narrow_int_from_double.
uint8_t narrow_int_wrap(DType t, uint64_t v);
uint8_t narrow_int_from_double(DType t, double v);
// The value of a stored i4/u4/i2/u2 byte.
int64_t narrow_int_value(DType t, uint8_t stored);

// n elements of `from` at `in` converted to `to` at `out` (dtype_size bytes each), where at
// least one of the two is storage-only; rlx::Error otherwise. `o` applies to float8 targets.
void cast_narrow(DType from, DType to, const void* in, void* out, int64_t n, NarrowCast o = {});

}  // namespace rlx
