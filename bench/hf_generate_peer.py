#!/usr/bin/env python3
"""The PyTorch peer of `bench_generate --device cuda`: transformers' LlamaForCausalLM with random
weights of the same shape, `generate` with a static KV cache, eager and under torch.compile.

Prints, per mode, the prefill time of the prompt (a generate call of one new token: the prompt's
forward, the first token's argmax) and the decode tokens/s (a generate call of 1 + N tokens; its
extra time over the first call, over N), medians of --repeat runs after --warmup runs:

  HF_GENERATE mode=compile dtype=bf16 prompt=512 prefill_ms=12.345 decode_tps=456.7

Modes: "static" (static cache, no compilation: generate's automatic compile turned off),
"auto" (static cache and generate's own torch.compile of the decoding forward, which recent
transformers apply to static caches by themselves), "compile" (the whole forward under
torch.compile with mode="reduce-overhead" and fullgraph, the older documented recipe; with
transformers 4.5x it fails inside generate on overwritten CUDA-graph outputs, reported as such).
Needs torch (CUDA) and transformers; prints SKIP and exits 0 without them.

  python3 bench/hf_generate_peer.py --layers 16 --hidden 2048 --heads 32 --kv-heads 8 --ffn 5632 \\
      --vocab 32000 --prompt 512 --n 128 --dtype bf16 --modes static,auto
"""
import argparse
import statistics
import sys
import time


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in (("layers", 16), ("hidden", 2048), ("heads", 32), ("kv-heads", 8), ("ffn", 5632),
                          ("vocab", 32000), ("prompt", 512), ("n", 128), ("warmup", 3), ("repeat", 5)):
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--modes", default="static,auto", help="comma-separated: static, auto, compile")
    return p.parse_args()


def main():
    a = parse()
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        print(f"SKIP: {e}")
        return 0
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device for torch")
        return 0
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg = LlamaConfig(hidden_size=a.hidden, intermediate_size=a.ffn, num_hidden_layers=a.layers,
                      num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, vocab_size=a.vocab,
                      max_position_embeddings=max(4096, a.prompt + a.n + 1), rms_norm_eps=1e-5,
                      tie_word_embeddings=False)
    torch.manual_seed(0)
    g = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(3, a.vocab, (1, a.prompt), device="cuda", generator=g)
    print(f"torch {torch.__version__}, transformers {__import__('transformers').__version__}, "
          f"{torch.cuda.get_device_name()}")
    for mode in a.modes.split(","):
        with torch.device("cuda"):
            model = LlamaForCausalLM(cfg).to(dtype).eval()
        params = sum(p.numel() for p in model.parameters())
        gc = model.generation_config
        gc.cache_implementation = "static"
        gc.pad_token_id = 0
        if mode == "static":
            gc.disable_compile = True
        elif mode == "auto":
            gc.disable_compile = False
        elif mode == "compile":
            model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        else:
            print(f"unknown mode {mode}")
            return 2

        def timed(n):
            torch.cuda.synchronize()
            t = time.perf_counter()
            with torch.inference_mode():
                out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
            torch.cuda.synchronize()
            assert out.shape[1] == a.prompt + n, out.shape
            return time.perf_counter() - t

        try:
            for _ in range(a.warmup):
                timed(1)
                timed(1 + a.n)
            first = [timed(1) for _ in range(a.repeat)]
            full = [timed(1 + a.n) for _ in range(a.repeat)]
        except Exception as e:  # report and go on with the next mode
            print(f"HF_GENERATE mode={mode} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            continue
        pre = statistics.median(first)
        dec = (statistics.median(full) - pre) / a.n
        print(f"HF_GENERATE mode={mode} dtype={a.dtype} params={params / 1e6:.1f}M prompt={a.prompt} "
              f"prefill_ms={pre * 1e3:.3f} prompt_tps={a.prompt / pre:.1f} decode_tps={1.0 / dec:.2f} "
              f"decode_ms={dec * 1e3:.3f}", flush=True)
        del model
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
