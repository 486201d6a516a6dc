#pragma once
// Tensor-core attention (kernels/attention_mma.h): which Attention steps it runs, its tile
// configuration, and the lowering that lower_attention() tries first.
#include <cstdint>
#include <string>

#include "backends/cuda/lower.h"

namespace rlx::cuda {

// Block tile of the tensor-core kernel: `warps` warps, each owning 16 * `m_tiles` query rows,
// stream K/V tiles of `keys` keys; `q_in_regs` keeps each warp's Q fragments in registers
// (else they are re-read from shared memory for every K tile).
struct AttnMmaTile {
  int warps = 4, m_tiles = 1, keys = 64;
  bool q_in_regs = false;
  int rows() const { return 16 * m_tiles * warps; }
};

// The tile for `head_dim`: the measured default, or
// RLX_CUDA_ATTN_TILE="<warps>,<m_tiles>,<keys>,<q_in_regs>" (warps 1/2/4/8, m_tiles 1/2,
// keys 16/32/64/128, q_in_regs 0/1) for sweeps; a malformed value is an rlx::Error.
AttnMmaTile attention_mma_tile(int64_t head_dim);

// Shared-memory bytes of one block (Q tile + two stages of K and V).
size_t attention_mma_smem(const AttnMmaTile& tile, int64_t head_dim);

// Why the tensor-core kernels cannot run attention of this geometry, dtype and operand addresses
// ("" when they can): f16/bf16 only, no custom/bias mask unless `custom_masks` (the wgmma kernel
// applies them, the mma.sync one does not), head_dim a multiple of 16 <= 256, q_len >= 16
// (shorter queries, i.e. decode, use the split-KV kernel), every row stride a multiple of 8
// elements and every base address 16-byte aligned; RLX_CUDA_ATTN_MMA=0 turns it off.
std::string attention_mma_rejection(const plan::AttentionGeom& g, DType t, const void* q, const void* k,
                                    const void* v, const void* out, bool custom_masks = false);

// Block tile of the Hopper (wgmma, sm_90a) kernel: `groups` consumer warpgroups of 64 query
// rows each stream K/V tiles of `keys` keys through `stages` shared-memory stages; the register
// budget is cut for `blocks` resident blocks per SM.
struct AttnWgmmaTile {
  int groups = 2, keys = 128, stages = 2, blocks = 1;
  bool pipelined = true;  // the next tile's scores overlap this tile's softmax
  int rows() const { return 64 * groups; }
  int threads() const { return 128 * (groups + 1); }  // + the producer warpgroup
  // Registers per thread of the producer / a consumer after the hand-over (setmaxnreg);
  // consumer_regs() is 0 when the tile needs no hand-over.
  int producer_regs() const { return 24; }
  int consumer_regs() const;
  // Registers per thread at launch; ptxas compiles the whole kernel within this many.
  int launch_regs() const;
};

// The wgmma tile for `head_dim`: the measured default, or
// RLX_CUDA_ATTN_WGMMA="<groups>,<keys>,<stages>,<blocks>[,<pipelined>]" (groups 1/2/3, keys
// 64/128, stages 2/3, blocks 1/2, pipelined 0/1) for sweeps; a malformed value is an rlx::Error.
AttnWgmmaTile attention_wgmma_tile(int64_t head_dim);

// Shared-memory bytes of one wgmma block (Q tile, the K and V stages, 1024 for alignment and the
// mbarriers).
size_t attention_wgmma_smem(const AttnWgmmaTile& tile, int64_t head_dim);

// Why a step the tensor cores take (attention_mma_rejection() == "") cannot use the wgmma
// kernel on a device of compute capability cc_major.cc_minor ("" when it can): wgmma needs
// exactly sm_90 and head_dim 64 or 128, TMA sequence lengths and heads below 2^31 and a driver
// with cuTensorMapEncodeTiled (checked by the lowering); RLX_CUDA_ATTN_WGMMA=0 turns it off.
std::string attention_wgmma_rejection(int64_t head_dim, int cc_major, int cc_minor);

// The wgmma wrappers of the kernel (kernels/attention_wgmma.h) for dtype t: wg_qk
// (m64n<qk_n>k16, both operands K-major in shared memory) and wg_pv (m64n<pv_n>k16, A from
// registers, B N-major in shared memory).
std::string attention_wgmma_wrappers(DType t, int qk_n, int pv_n);

// Lowers the step onto the tensor-core kernel when attention_mma_rejection() allows it (the
// wgmma kernel when attention_wgmma_rejection() also does, else the mma.sync one); returns
// false (nothing appended) otherwise.
bool lower_attention_mma(LowerContext& cx, const plan::Step& st);

// Attention steps lowered onto the tensor-core kernels in this process, and of those onto the
// wgmma kernel (for tests).
uint64_t attention_mma_steps();
uint64_t attention_wgmma_steps();

}  // namespace rlx::cuda
