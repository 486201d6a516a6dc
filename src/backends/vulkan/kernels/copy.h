#pragma once
// GLSL templates of the Vulkan data-movement kernels (lower_copy.cpp). Elements move as raw
// words of their size: the placeholder `ELEM` is uint8_t / uint16_t / uint / uvec2 (8-byte
// elements as two words, so f64 and i64 moves need no 64-bit arithmetic). `HEADER` is the
// version and extension lines. Every kernel follows the convention of lower.h: bindings in
// operand order, push constants = one element offset per binding, then the kernel's parameters.
// Indices are 32-bit (the lowering rejects tensors of 2^31 or more elements).
namespace rlx::vulkan::ksrc {

// out[i] = in[in_offset + sum_d c_d(i) * strides[d]] over `dims` (row-major, rank <= 8; a stride
// may be 0 (broadcast) or negative (reverse)). One pipeline per element size serves every shape.
inline constexpr const char* kStridedCopy = R"GLSL(HEADER
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) writeonly buffer BOut { ELEM data[]; } dst;
layout(std430, set = 0, binding = 1) readonly buffer BIn { ELEM data[]; } src;
layout(push_constant) uniform P {
  uint o_out, o_in;
  uint total, rank;
  int in_offset;
  uint dims[8];
  int strides[8];
} p;
void main() {
  for (uint i = gl_GlobalInvocationID.x; i < p.total; i += gl_NumWorkGroups.x * 256u) {
    uint t = i;
    int off = p.in_offset;
    for (int d = int(p.rank) - 1; d >= 0; --d) {
      const uint n = p.dims[d];
      off += int(t % n) * p.strides[d];
      t /= n;
    }
    dst.data[p.o_out + i] = src.data[p.o_in + uint(off)];
  }
}
)GLSL";

// A batched 2-D transpose through workgroup memory: out dims are [.., A (axis `a`), .., L (last)]
// and the input is contiguous along A (stride 1) while the output is contiguous along L, so each
// 32x32 tile is read along A and written along L, both coalesced. The other dims (`rank` - 2 of
// them) form the batch walked by z. dims/strides as in kStridedCopy (out dims, input strides).
inline constexpr const char* kTiledTranspose = R"GLSL(HEADER
layout(local_size_x = 32, local_size_y = 8) in;
layout(std430, set = 0, binding = 0) writeonly buffer BOut { ELEM data[]; } dst;
layout(std430, set = 0, binding = 1) readonly buffer BIn { ELEM data[]; } src;
layout(push_constant) uniform P {
  uint o_out, o_in;
  uint batch, rank, axis;
  int in_offset;
  uint dims[8];
  int strides[8];
} p;
shared ELEM tile[32][33];
void main() {
  const uint rank = p.rank, a = p.axis;
  const uint A = p.dims[a], L = p.dims[rank - 1u];
  const int sL = p.strides[rank - 1u];
  // The output's stride of dim a (row-major).
  uint oA = 1u;
  for (uint d = a + 1u; d < rank; ++d) oA *= p.dims[d];
  const uint tilesL = (L + 31u) / 32u, tilesA = (A + 31u) / 32u;
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  for (uint b = gl_WorkGroupID.z; b < p.batch; b += gl_NumWorkGroups.z) {
    // Batch index -> the offsets of the other dims in the input and the output.
    uint t = b, ostride = 1u, obase = 0u;
    int ibase = p.in_offset;
    for (int d = int(rank) - 1; d >= 0; --d) {
      const uint n = p.dims[d];
      if (uint(d) != a && uint(d) != rank - 1u) {
        const uint c = t % n;
        t /= n;
        ibase += int(c) * p.strides[d];
        obase += c * ostride;
      }
      ostride *= n;
    }
    for (uint ta = gl_WorkGroupID.y; ta < tilesA; ta += gl_NumWorkGroups.y) {
      for (uint tl = gl_WorkGroupID.x; tl < tilesL; tl += gl_NumWorkGroups.x) {
        const uint a0 = ta * 32u, l0 = tl * 32u;
        for (uint j = ty; j < 32u; j += 8u) {
          const uint ia = a0 + tx, il = l0 + j;
          if (ia < A && il < L) tile[j][tx] = src.data[p.o_in + uint(ibase + int(ia) + int(il) * sL)];
        }
        barrier();
        for (uint j = ty; j < 32u; j += 8u) {
          const uint ia = a0 + j, il = l0 + tx;
          if (ia < A && il < L) dst.data[p.o_out + obase + ia * oA + il] = tile[tx][j];
        }
        barrier();
      }
    }
  }
}
)GLSL";

// Concat of COUNT inputs into the output viewed as [outer, width]: input k fills columns
// [c[k], c[k + 1]) of every row (its own rows are c[k + 1] - c[k] wide). The kernel covers
// columns [c[0], c[COUNT]) of each row; IN_DECLS / PICK are generated per COUNT.
inline constexpr const char* kConcat = R"GLSL(HEADER
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) writeonly buffer BOut { ELEM data[]; } dst;
IN_DECLS
layout(push_constant) uniform P {
  uint o_out;
  uint o_in[COUNT];
  uint outer, width;
  uint c[COUNT + 1];
} p;
void main() {
  const uint span = p.c[COUNT] - p.c[0];
  const uint total = p.outer * span;
  for (uint i = gl_GlobalInvocationID.x; i < total; i += gl_NumWorkGroups.x * 256u) {
    const uint r = i / span, col = p.c[0] + i % span;
    uint k = 0u;
    while (k + 1u < COUNT && col >= p.c[k + 1u]) ++k;
    const uint cols = p.c[k + 1u] - p.c[k];
    const uint j = p.o_in[k] + r * cols + (col - p.c[k]);
    ELEM v;
PICK
    dst.data[p.o_out + r * p.width + col] = v;
  }
}
)GLSL";

// out[o, j, i] = data[o, idx[j], i] over [outer, nidx, inner]; a negative index counts from the
// end; one outside [-axis, axis) raises the gather error (code ERR) and writes zero bits.
// IDX_LOAD reads idx[j] into `k` and sets `ok` (per index dtype).
inline constexpr const char* kGather = R"GLSL(HEADER
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer BData { ELEM data[]; } data;
IDX_DECL
layout(std430, set = 0, binding = 2) writeonly buffer BOut { ELEM data[]; } dst;
layout(std430, set = 0, binding = 3) buffer BErr { int code[]; } err;
layout(push_constant) uniform P {
  uint o_data, o_idx, o_out, o_err;
  uint total, axis, nidx, inner;
} p;
void main() {
  for (uint i = gl_GlobalInvocationID.x; i < p.total; i += gl_NumWorkGroups.x * 256u) {
    const uint in_ = i % p.inner, t = i / p.inner;
    const uint j = t % p.nidx, o = t / p.nidx;
    bool ok;
    uint kk;
IDX_LOAD
    if (!ok) {
      atomicMax(err.code[p.o_err], ERR);
      dst.data[p.o_out + i] = ZERO;
      continue;
    }
    dst.data[p.o_out + i] = data.data[p.o_data + (o * p.axis + kk) * p.inner + in_];
  }
}
)GLSL";

// Pad: out[o] = in[sum_d source[off_d + o_d] * in_strides[d]], or `fill` where an axis' source
// index is -1. The table holds: rank, then out_dims[rank], in_strides[rank], source offsets[rank],
// then the per-axis source indices (int32 bits).
inline constexpr const char* kPad = R"GLSL(HEADER
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) writeonly buffer BOut { ELEM data[]; } dst;
layout(std430, set = 0, binding = 1) readonly buffer BIn { ELEM data[]; } src;
layout(std430, set = 0, binding = 2) readonly buffer BTab { int data[]; } tab;
layout(push_constant) uniform P {
  uint o_out, o_in, o_tab;
  uint total, fill_lo, fill_hi;
} p;
void main() {
  const uint t0 = p.o_tab;
  const int rank = tab.data[t0];
  const ELEM fill = FILL;
  for (uint i = gl_GlobalInvocationID.x; i < p.total; i += gl_NumWorkGroups.x * 256u) {
    uint rem = i;
    int off = 0;
    bool outside = false;
    for (int d = rank - 1; d >= 0; --d) {
      const uint n = uint(tab.data[t0 + 1u + uint(d)]);
      const uint o = rem % n;
      rem /= n;
      const int j = tab.data[t0 + 1u + uint(3 * rank) + uint(tab.data[t0 + 1u + uint(2 * rank + d)]) + o];
      if (j < 0) outside = true;
      else off += j * tab.data[t0 + 1u + uint(rank + d)];
    }
    dst.data[p.o_out + i] = outside ? fill : src.data[p.o_in + uint(off)];
  }
}
)GLSL";

}  // namespace rlx::vulkan::ksrc
