#pragma once
// Hugging Face Llama-family checkpoints (a directory with config.json and safetensors weights) as the
// GGUF layout that models/llama_gguf.h builds, so that build_llama_from_gguf, the KV-cache decoder
// and rlx::Generator run them unchanged.
//
// The directory:
//   config.json                         model_type "llama", "mistral", "qwen2", "qwen3", "gemma" or
//                                       "gemma2" (architectures, when given, LlamaForCausalLM /
//                                       MistralForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM /
//                                       GemmaForCausalLM / Gemma2ForCausalLM)
//   model.safetensors                   the weights in one file, or
//   model.safetensors.index.json        {"weight_map": {tensor: shard file}} and the shards it names
//                                       (paths inside the directory)
//
// config.json keys read (HF Llama's defaults where a key may be absent):
//   hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, vocab_size (required);
//   num_key_value_heads (= heads), head_dim (= hidden / heads; Qwen3 128), rms_norm_eps (1e-6),
//   max_position_embeddings (2048; Mistral 131072, Qwen 32768) -> context_length,
//   tie_word_embeddings (false), hidden_act ("silu", the only one run), attention_bias (llama,
//   qwen3: biases on q / k / v / o; mistral: false only), mlp_bias (false; true is refused),
//   sliding_window (Mistral; Qwen with use_sliding_window / max_window_layers / layer_types: the
//   context is capped at the window, where both agree exactly);
//   RoPE: rope_theta (10000) and rope_scaling (transformers 4.x), or rope_parameters
//   {rope_type, rope_theta, ...} (transformers 5). rope types: "default", "linear" (factor ->
//   llama.rope.scaling.type linear) and "llama3" (factor, low_freq_factor, high_freq_factor,
//   original_max_position_embeddings -> the per-pair divisors in rope_freqs.weight); others
//   (dynamic, yarn, longrope, ...) are refused naming the key.
//   Keys that do not change the forward (token ids, dtype, generation defaults, initializer_range,
//   attention_dropout, pretraining_tp, ...) are accepted; any other key is an rlx::Error naming it,
//   so that nothing that might change the model is dropped silently. quantization_config
//   (GPTQ, AWQ, bitsandbytes weights) is refused.
//   bos_token_id / eos_token_id (an id or a list) are returned in HfLlamaConfig for callers that
//   stop generation without a tokenizer.
//
// Tensors (HF name -> GGUF name), every one checked against the config's shape:
//   model.embed_tokens.weight -> token_embd.weight     model.norm.weight -> output_norm.weight
//   lm_head.weight -> output.weight (absent when tied; when tied and present, it must equal the
//   embedding byte for byte), and per layer N, model.layers.N.:
//   input_layernorm.weight -> blk.N.attn_norm.weight   post_attention_layernorm.weight -> blk.N.ffn_norm.weight
//   self_attn.{q,k,v,o}_proj.weight -> blk.N.attn_{q,k,v,output}.weight
//   mlp.{gate,up,down}_proj.weight -> blk.N.ffn_{gate,up,down}.weight
//   self_attn.{q,k,v,o}_proj.bias -> blk.N.attn_{q,k,v,output}.bias (qwen2: q / k / v; attention_bias)
//   self_attn.{q,k}_norm.weight -> blk.N.attn_{q,k}_norm.weight (qwen3)
// Gemma: the norm weights are written as f32 (1 + w) (Gemma's RMSNorm multiplies by 1 + w; GGUF
// stores the sum, as llama.cpp's converter does); gemma2's post_attention_layernorm ->
// post_attention_norm, pre_feedforward_layernorm -> ffn_norm, post_feedforward_layernorm ->
// post_ffw_norm; hidden_activation / hidden_act must be gelu_pytorch_tanh (GeGLU), the head is
// tied by default, head_dim defaults to 256, attn_logit_softcapping / final_logit_softcapping
// (gemma2 defaults 50 / 30, null = off) become gemma2.*_softcapping, query_pre_attn_scalar
// (default 256) gemma2.attention.scale where llama.cpp's rule would scale otherwise, and the
// sliding window caps the context.
// Any other tensor is an error naming it. F32, F16 and BF16 are kept as they are (the builder
// computes in f32 and runs F16 / BF16 matrices from their 2-byte form); other dtypes are refused.
//
// RoPE rows: Hugging Face rotates the pairs (i, i + D/2) of each head (rotate_half); the GGUF
// llama layout stores q and k with the rows of each head reordered so that those pairs are
// adjacent (row i -> 2i, row i + D/2 -> 2i + 1), which the builder rotates as RopeStyle::GptJ.
// For llama and mistral the converter applies that reordering to q_proj (per query head) and
// k_proj (per KV head) and their biases; qwen2 / qwen3 files keep Hugging Face's order (as
// llama.cpp's converter writes them) and are rotated as NeoX. The logits are the same model's.
//
// Errors: every malformed input (no config.json, bad JSON, a missing or mistyped key, an
// unsupported architecture or option, a missing / unknown / misshapen tensor, an unsupported
// dtype, a shard listed but absent, an index that disagrees with its shards) is an rlx::Error
// naming the file, key or tensor and what to do.
#include <cstdint>
#include <string>
#include <vector>

#include "rlx/gguf.h"

namespace rlx::models {

struct HfLlamaConfig {
  std::string model_type;  // "llama", "mistral", "qwen2", "qwen3", "gemma" or "gemma2"
  bool qkv_bias = false;   // q / k / v projections have biases (qwen2; attention_bias of llama / qwen3)
  bool o_bias = false;     // the output projection too (attention_bias of llama / qwen3)
  bool qk_norm = false;    // qwen3: q_norm / k_norm of each head
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0, context = 0;
  double rms_eps = 1e-6, rope_theta = 10000.0;
  std::string rope_type = "default";  // "default", "linear" or "llama3"
  double rope_factor = 1.0;           // linear and llama3
  double rope_low_freq_factor = 0, rope_high_freq_factor = 0;  // llama3
  int64_t rope_original_context = 0;                            // llama3
  bool tied = false;
  int64_t sliding_window = 0;  // 0: none
  // gemma / gemma2: attention and final logit softcaps (0: off) and query_pre_attn_scalar (the
  // scores are scaled by its inverse square root; 0: head_dim).
  double attn_softcap = 0.0, final_softcap = 0.0, query_pre_attn_scalar = 0.0;
  std::vector<int32_t> bos_ids, eos_ids;
};

// True when `path` is a directory: the CLI and tools take a directory as a Hugging Face checkpoint
// (load_hf_llama then says what it lacks, e.g. config.json) and anything else as a file.
bool is_hf_checkpoint_dir(const std::string& path);

// config.json of the checkpoint directory `dir`, checked; rlx::Error naming the key otherwise.
HfLlamaConfig read_hf_llama_config(const std::string& dir);

// llama3 RoPE: the divisor of each pair's inverse frequency (n_rot / 2 values, all >= 1), as
// GGUF's rope_freqs.weight holds it. The other rope types have none.
std::vector<float> hf_llama3_rope_divisors(const HfLlamaConfig& c);

// The checkpoint as a GGUF file in memory (general.architecture llama for llama / mistral, else
// qwen2 / qwen3, with that prefix's metadata and GGUF-named tensors); the safetensors files are
// read once and not kept.
GgufFile load_hf_llama(const std::string& dir);

// The same file written to `out_path` (through a temporary file renamed onto it).
void save_hf_llama_as_gguf(const std::string& dir, const std::string& out_path);

}  // namespace rlx::models
