#pragma once
// Llama-family graphs from a GGUF file (the layout llama.cpp's converter writes).
//
// Architectures (general.architecture): "llama" (Llama 2/3, Mistral and others converted as
// llama), "qwen2" (Qwen2 / Qwen2.5: biases on q / k / v) and "qwen3" (Qwen3 dense: RMSNorm of
// each head's q and k before RoPE, attn_q_norm / attn_k_norm). The metadata keys below take the
// architecture as their prefix <p>.
// Metadata:
//   <p>.block_count, <p>.embedding_length, <p>.feed_forward_length, <p>.attention.head_count,
//   <p>.context_length (required); <p>.attention.head_count_kv (default: head_count),
//   <p>.rope.freq_base (10000), <p>.attention.layer_norm_rms_epsilon (1e-5),
//   <p>.rope.dimension_count (the head dim), <p>.attention.key_length (embedding / heads),
//   <p>.rope.scaling.type ("none" or "linear" with <p>.rope.scaling.factor; also the older
//   <p>.rope.scale_linear), <p>.vocab_size (checked against token_embd). Keys that change the model
//   in ways the builder does not implement are refused: <p>.expert_count > 0 (MoE), other rope
//   scaling types (yarn, longrope), attention.value_length != key_length.
// Tensors (GGUF names, rlx row-major shapes [out, in]):
//   token_embd.weight [vocab, E]   output_norm.weight [E]   output.weight [vocab, E] (absent: tied
//   to token_embd), and per block N: blk.N.attn_norm.weight [E], blk.N.attn_q.weight [H*D, E],
//   blk.N.attn_k.weight / attn_v.weight [Hkv*D, E], blk.N.attn_output.weight [E, H*D],
//   blk.N.ffn_norm.weight [E], blk.N.ffn_gate.weight / ffn_up.weight [F, E], blk.N.ffn_down.weight [E, F],
//   rope_freqs.weight [n_rot / 2] (optional, Llama 3.1 style: the angle of pair i is divided by it),
//   blk.N.attn_{q,k,v,output}.bias [rows] (optional, any architecture; Qwen2 has q / k / v ones),
//   blk.N.attn_q_norm.weight / attn_k_norm.weight [D] (qwen3: required; others: an error).
// Any other tensor (MLP biases, extra norms, ...) is an error naming it: the file is another model.
//
// Projections: a block-quantized weight (Q4_0 ... Q8_0, Q2_K ... Q6_K) becomes a DequantMatMul on
// its raw bytes (a u8 [out, row_bytes] param); so does an F16 / BF16 weight with options.half_weights
// (rows a multiple of 32); otherwise an F32 / F16 / BF16 weight becomes a MatMul with the transposed
// f32 param. The embedding table and the norm weights are f32 params (dequantized when
// stored quantized). Everything computes in f32, unless options.activations is f16 / bf16: then
// the activations, the embedding table, the norm weights, the RoPE tables and the KV caches are of
// that dtype, F32 / F16 / BF16 matrices become MatMuls with params of that dtype (transposed at
// build time to [in, out]), block-quantized ones DequantMatMuls of 16-bit activations, and only
// the logits are cast back to f32 (the precision of PyTorch's bf16 models, at half the bytes a
// decode step moves through its caches and activations).
//
// RoPE: for "llama" files llama.cpp's converter permutes the rows of attn_q and attn_k (and their
// biases) within each head so that the rotation pairs of the Hugging Face (NeoX, half-split)
// layout, dims (i, i + D/2), become adjacent rows (2i, 2i + 1); llama.cpp then rotates adjacent
// pairs. The graph therefore applies Rope with RopeStyle::GptJ to the GGUF rows as stored, which
// is the same model as the NeoX rotation of the unpermuted weights
// (tests/models/test_llama_gguf.cpp checks both against each other). "qwen2" / "qwen3" files keep
// Hugging Face's row order and are rotated as RopeStyle::NeoX (llama.cpp does the same).
//
// The graph (teacher-forced forward over a whole sequence, no KV cache):
//   inputs  "tokens" (S) i64 token ids, "positions" (S) i64 (0, 1, ... for a fresh sequence)
//   output  "logits" (1, S, vocab) f32
// S is the symbolic dim "seq" unless `seq` is set.
#include <cstdint>
#include <string>

#include "rlx/gguf.h"
#include "rlx/graph.h"
#include "rlx/session.h"

namespace rlx::models {

struct GgufLlamaConfig {
  std::string arch = "llama";  // general.architecture: llama, qwen2, qwen3, gemma or gemma2
  RopeStyle rope_style = RopeStyle::GptJ;  // GptJ for llama's permuted rows, NeoX otherwise
  bool qk_norm = false;  // qwen3: RMSNorm of each head's q and k (attn_q_norm / attn_k_norm)
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0, context = 0;
  int64_t n_rot = 0;
  double rope_theta = 10000.0, rms_eps = 1e-5;
  double rope_linear = 1.0;     // linear rope scaling: positions divided by it
  bool rope_freqs = false;      // rope_freqs.weight present
  bool tied_output = false;  // no output.weight: the logits use token_embd.weight
  // Gemma (gemma, gemma2): the embedding scaled by sqrt(hidden), GeGLU (tanh GELU) instead of
  // SwiGLU; norm weights are stored as (1 + w), so the norms are plain RMSNorms here.
  bool gemma = false;
  ActKind ffn_act = ActKind::Silu;  // the gate's activation: silu (SwiGLU) or gelu_approx (GeGLU)
  double embed_scale = 1.0;         // the embedding rows are multiplied by it
  // gemma2: post_attention_norm / post_ffw_norm on each block's attention and MLP outputs,
  // attention logits softcapped (0: off), the final logits softcapped, the query scale.
  bool post_norms = false;
  double attn_softcap = 0.0, final_softcap = 0.0;
  double attn_scale = 0.0;        // 0: 1 / sqrt(head_dim)
  int64_t sliding_window = 0;     // gemma2's local layers' window; the context is capped at it
};

// The llama.* metadata and tensor shapes, checked for consistency; rlx::Error naming the key or
// tensor otherwise.
GgufLlamaConfig read_gguf_llama_config(const GgufFile& f);

struct GgufLlamaOptions {
  int64_t seq = 0;  // 0: symbolic "seq" (the KV-cache decoder takes only 0)
  // F16 / BF16 matrices (rows a multiple of 32) stay 2 bytes a weight as DequantMatMul's 16-bit
  // formats, which the CPU and CUDA backends run; false: widened to f32 params multiplied by a
  // MatMul, which every backend runs. Choose with half_weights_run_on(device).
  bool half_weights = true;
  // Block-quantized matrices (Q4_0 .. Q8_0, Q2_K .. Q6_K) stay in their blocks, multiplied by
  // DequantMatMul, which the CPU, CUDA and Vulkan backends run; false: dequantized once at load
  // to params of the activations' dtype multiplied by a MatMul (2 or 4 bytes a weight instead of
  // 0.5-1.1), which every backend runs. Choose with block_weights_run_on(device).
  bool block_weights = true;
  // The dtype the model computes in: f32 (default), or f16 / bf16 (see above).
  DType activations = DType::F32;
  // Sequences run together (the batch dim B of every activation and cache). 1: tokens and
  // positions are (S); more: (B, S), each sequence at its own positions.
  int64_t batch = 1;
  // The sampling head (a KV-cache decoder only; 0: none). With K > 0 the decoder also takes
  // `sample_history` (B, sample_history) token ids, `sample_penalty` (B) and
  // `sample_inv_temperature` (B) (f32), applies the repetition penalty to the logits of the ids
  // listed (ids may repeat; logit / p if positive, * p if not) to the first logits row of each
  // sequence and outputs the penalized row's top K, largest first, ties by lower id
  // (`sample_logits` (B, K) f32, `sample_ids` (B, K) i64) and `sample_mass` (B): the sum over the
  // vocabulary of exp((logit - max) * inv_temperature). Generator picks tokens from these (generate.h).
  int64_t sample_candidates = 0;
  int64_t sample_history = 64;
};

// Whether `device`'s backend runs DequantMatMul's 16-bit weight formats (GgufLlamaOptions::half_weights).
bool half_weights_run_on(Device device);

// Whether `device`'s backend runs DequantMatMul's block formats (GgufLlamaOptions::block_weights).
bool block_weights_run_on(Device device);
// The names of the file's block-quantized tensors that a graph built with `options` dequantizes
// at load (none with options.block_weights), and the bytes they take as stored and as params.
struct DequantizedAtLoad {
  std::vector<std::string> names;
  int64_t stored_bytes = 0, param_bytes = 0;
};
DequantizedAtLoad dequantized_at_load(const GgufFile& f, const GgufLlamaOptions& options);
// Bytes the graph built with `options` holds for the file's tensor `t`: a projection matrix as
// stored (blocks, or 16-bit weights under half_weights with f32 activations) or as params of the
// activations' dtype; any other tensor as stored.
int64_t held_bytes(const GgufFile& f, const GgufTensorInfo& t, const GgufLlamaOptions& options);

struct GgufLlama {
  Graph graph;
  NamedTensors params;  // set each with CompiledGraph::set_param (copies of the file's bytes)
  GgufLlamaConfig config;
};

GgufLlama build_llama_from_gguf(const GgufFile& f, const GgufLlamaOptions& options = {});

// The KV-cache decoder (rlx/generate.h runs it): the same model over a chunk of S new tokens
// (S is the symbolic dim "seq": a whole prompt, or 1 per decode step) that reads and writes
// preallocated caches of `max_ctx` rows.
//   inputs  "tokens" (S) i64, "positions" (S) i64 (the chunk's positions in the sequence, each
//           < max_ctx), "logit_rows" (R) i64 (the chunk rows whose logits are wanted; R is the
//           symbolic dim "rows"), and per block N "cache_k.N", "cache_v.N" (B, max_ctx, Hkv, D) of
//           the activations' dtype (options.activations); B = options.batch, and with B > 1
//           tokens and positions are (B, S): each sequence of the batch at its own positions
//   outputs "logits" (B, R, vocab) f32, then "cache_k.N", "cache_v.N" per block (outputs 1 + 2N and
//           2 + 2N): the caches with the chunk's keys (after RoPE) and values written at rows
//           `positions` (CacheWrite; every other row unchanged). A position outside [0, max_ctx)
//           is an rlx::Error at run time. Then "greedy_token" (B, R) i64, the argmax of each
//           logits row (the first of the maxima), and "logits_sum" (B, R) f32, each row's sum (NaN
//           when a logit is): outputs 1 + 2L and 2 + 2L, for greedy decoding without the logits.
// Attention uses a Positions mask: query row i sees cache row j when j <= positions[(b,) i] (causal
// within the chunk, the whole valid prefix before it); kernels read only the keys up to the
// largest position, a run-time length. Rows beyond the last position are never read, so the
// caches need no clearing between sequences. The graph does not change with the position, so one
// compile per chunk length serves every step (bind_state carries the caches between runs; the CPU
// then writes the new rows in place and copies no cache).
GgufLlama build_llama_decoder_from_gguf(const GgufFile& f, int64_t max_ctx, const GgufLlamaOptions& options = {});

// Whether the builder reads GGUF files of general.architecture `arch` (llama, qwen2, qwen3,
// gemma, gemma2).
bool is_gguf_llama_family(const std::string& arch);

// One-line summary for `rlx inspect`: "llama: 2 blocks, hidden 64, heads 4 (kv 2) x 16, ffn 128,
// vocab 100, context 256, rope theta 10000, projections: Q4_K x 12, F16 x 2".
std::string describe_gguf_llama(const GgufFile& f);

}  // namespace rlx::models
