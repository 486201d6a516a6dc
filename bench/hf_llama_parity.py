#!/usr/bin/env python3
"""rlx against transformers on Hugging Face Llama-family checkpoints (issue 29's proof).

For each config (small; ~0.5B; qwen2, qwen3, gemma and gemma2 small ones) and dtype (fp32; bf16), builds the
causal LM (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM) with random weights (biases and
per-head norms drawn at random too, not left at their zero / one init),
saves it with save_pretrained (safetensors; the 0.5B one in several shards), and compares:

  * teacher-forced logits over a random token sequence: rlx's whole-sequence graph (--seq-logits,
    every position) and rlx's KV-cache generator (--logits: the prompt prefilled, then one decode
    step per token) against transformers' forward of the same sequence;
  * greedy generation of --gen tokens from the prompt: rlx::Generator against a transformers
    greedy loop (argmax, KV cache).

The error is max |rlx - ref| / max |ref| over the compared logits (relative to the logit scale).
The reference is transformers in float32 on the CPU (TF32 off), of the weights as saved: for bf16
checkpoints that is the bf16 weights widened to f32, which is what rlx computes (f32 math on bf16
weights), so the fp32 target (1e-4) applies to both. For bf16 the script also runs transformers'
native bf16 forward and checks rlx against it within bf16 tolerance: at most
max(2e-2, 2 * transformers-bf16's own error against the f32 reference); and runs rlx once more with
bf16 activations (hf_logits --activations bf16: bf16 math and caches, as transformers' bf16 model),
whose logits must be within that same tolerance of the f32 reference.

Run on a machine with torch + transformers + numpy and the rlx binaries (bench_generate's folder):
  python3 bench/hf_llama_parity.py --bin build/release --devices cpu,cuda
Options: --configs small,0.5b  --dtypes fp32,bf16  --seq 64 --prompt 8 --gen 32  --work DIR (kept
with --keep)  --threads N.  Without torch / transformers / numpy it prints SKIP and exits 0.
Exit status: 0 when every target passed (or SKIP), 1 otherwise.
"""
import argparse
import copy
import os
import shutil
import subprocess
import sys
import tempfile
import time

CONFIGS = {
    # vocab 1000, 4 layers, GQA 8/2, ffn 688 (not a multiple of 32: the f32 matmul fallback for
    # 16-bit weights), tied head, llama3 RoPE scaling.
    "small": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=2, vocab_size=1000, max_position_embeddings=2048, rms_norm_eps=1e-5,
                  tie_word_embeddings=True, rope_theta=500000.0,
                  rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                    original_max_position_embeddings=64)),
    # ~0.49B parameters: hidden 1024, 28 layers, 16 heads / 4 KV heads, ffn 4096, vocab 32000, untied.
    # Qwen2: q / k / v biases, tied head, NeoX rows as stored.
    "qwen2": dict(arch="qwen2", hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=2, vocab_size=1000, max_position_embeddings=4096, rms_norm_eps=1e-6,
                  tie_word_embeddings=True, rope_theta=1000000.0, use_sliding_window=False),
    # Qwen3: per-head RMSNorm of q and k, head_dim 64 != hidden / heads (32), untied.
    "qwen3": dict(arch="qwen3", hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=2, head_dim=64, vocab_size=1000, max_position_embeddings=4096, rms_norm_eps=1e-6,
                  tie_word_embeddings=False, rope_theta=1000000.0),
    # Gemma: GeGLU, embedding x sqrt(hidden), norms x (1 + w), tied head, head_dim 64 != hidden / heads.
    "gemma": dict(arch="gemma", hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=2, head_dim=64, vocab_size=1000, max_position_embeddings=4096, rms_norm_eps=1e-6,
                  tie_word_embeddings=True, rope_theta=10000.0, hidden_activation="gelu_pytorch_tanh"),
    # Gemma2: also post-attention / post-MLP norms, attention and final logit softcaps small enough
    # to bend a random model's scores and logits, query_pre_attn_scalar != head_dim; eager attention
    # (transformers applies the softcap there).
    "gemma2": dict(arch="gemma2", hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=8,
                   num_key_value_heads=2, head_dim=64, vocab_size=1000, max_position_embeddings=4096, rms_norm_eps=1e-6,
                   tie_word_embeddings=True, rope_theta=10000.0, hidden_activation="gelu_pytorch_tanh",
                   query_pre_attn_scalar=48, attn_logit_softcapping=5.0, final_logit_softcapping=8.0,
                   sliding_window=4096, attn_implementation="eager"),
    "0.5b": dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096, rms_norm_eps=1e-5,
                 tie_word_embeddings=False, rope_theta=10000.0),
}


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default="build/release", help="folder with the rlx binaries (hf_logits)")
    p.add_argument("--devices", default="cpu,cuda", help="rlx devices, comma-separated (cpu, cuda, vulkan, webgpu)")
    p.add_argument("--configs", default="small,0.5b,qwen2,qwen3,gemma,gemma2", help="comma-separated: " + ", ".join(CONFIGS))
    p.add_argument("--dtypes", default="fp32,bf16", help="comma-separated: fp32, bf16")
    p.add_argument("--seq", type=int, default=64, help="teacher-forced sequence length (default 64)")
    p.add_argument("--prompt", type=int, default=8, help="prompt tokens (default 8)")
    p.add_argument("--gen", type=int, default=32, help="greedy tokens (default 32)")
    p.add_argument("--threads", type=int, default=0, help="rlx CPU threads (0: all)")
    p.add_argument("--work", default="", help="folder for the checkpoints and .npy files (default: a temp folder)")
    p.add_argument("--keep", action="store_true", help="keep the work folder")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per rlx run (default 1800)")
    return p.parse_args()


def make_config(LlamaConfig, spec):
    """LlamaConfig of `spec` (rope_theta / rope_scaling spelled the 4.x way): transformers 5 takes
    them as rope_parameters."""
    spec = dict(spec)
    spec.pop("arch", None)
    theta, scaling = spec.pop("rope_theta"), spec.pop("rope_scaling", None)
    if "rope_parameters" in getattr(LlamaConfig, "__dataclass_fields__", {}) or hasattr(LlamaConfig(), "rope_parameters"):
        params = dict(scaling or {"rope_type": "default"})
        params["rope_theta"] = theta
        return LlamaConfig(rope_parameters=params, **spec)
    return LlamaConfig(rope_theta=theta, rope_scaling=scaling, **spec)


def rel_err(a, ref, np):
    return float(np.max(np.abs(a.astype(np.float64) - ref.astype(np.float64))) / max(float(np.max(np.abs(ref))), 1e-30))


def greedy(model, torch, prompt, n):
    """argmax decoding with the model's KV cache; the first maximal id on ties."""
    ids = []
    with torch.no_grad():
        out = model(torch.tensor([prompt]), use_cache=True)
        for i in range(n):
            nxt = int(torch.argmax(out.logits[0, -1].float()))
            ids.append(nxt)
            if i + 1 < n:
                out = model(torch.tensor([[nxt]]), past_key_values=out.past_key_values, use_cache=True)
    return ids


def save(model, path, shard):
    kw = {"max_shard_size": shard} if shard else {}
    try:
        model.save_pretrained(path, safe_serialization=True, **kw)
    except TypeError:  # transformers versions that always write safetensors
        model.save_pretrained(path, **kw)


def run_rlx(args, model_dir, device, prompt, follow, work, tag, activations="f32"):
    exe = os.path.join(args.bin, "hf_logits")
    steps, seq = os.path.join(work, tag + "_steps.npy"), os.path.join(work, tag + "_seq.npy")
    cmd = [exe, "--model", model_dir, "--device", device, "--prompt-ids", ",".join(map(str, prompt)),
           "--follow-ids", ",".join(map(str, follow)), "--logits", steps, "--seq-logits", seq,
           "--generate", str(args.gen), "--threads", str(args.threads), "--activations", activations]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if r.returncode != 0:
        raise RuntimeError("hf_logits failed (%d): %s" % (r.returncode, (r.stderr or r.stdout).strip()[-2000:]))
    greedy_ids, speed = None, ""
    for line in r.stdout.splitlines():
        if line.startswith("HF_LOGITS_GREEDY "):
            greedy_ids = [int(x) for x in line.split()[1].split(",")]
        if line.startswith("HF_LOGITS_SPEED "):
            speed = line[len("HF_LOGITS_SPEED "):]
    return steps, seq, greedy_ids, time.time() - t0, speed


def main():
    args = parse()
    try:
        import numpy as np
        import torch
        import transformers
        from transformers import LlamaConfig, LlamaForCausalLM
        classes = {"llama": (LlamaConfig, LlamaForCausalLM)}
        for arch, names in (("qwen2", ("Qwen2Config", "Qwen2ForCausalLM")), ("qwen3", ("Qwen3Config", "Qwen3ForCausalLM")),
                            ("gemma", ("GemmaConfig", "GemmaForCausalLM")), ("gemma2", ("Gemma2Config", "Gemma2ForCausalLM"))):
            if hasattr(transformers, names[0]):
                classes[arch] = (getattr(transformers, names[0]), getattr(transformers, names[1]))
    except ImportError as e:
        print("SKIP: hf_llama_parity needs torch, transformers and numpy (%s); run it where they are installed" % e)
        return 0
    if not os.path.exists(os.path.join(args.bin, "hf_logits")):
        print("FAIL: no hf_logits binary in --bin %s (build it: rlxb hf_logits)" % args.bin)
        return 1
    if args.prompt < 1 or args.seq <= args.prompt:
        print("FAIL: need 1 <= --prompt < --seq")
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    print("transformers %s, torch %s, numpy %s" % (transformers.__version__, torch.__version__, np.__version__))
    work = args.work or tempfile.mkdtemp(prefix="hf_parity_")
    os.makedirs(work, exist_ok=True)
    devices = [d for d in args.devices.split(",") if d]
    results = []  # (target, passed, detail)

    def target(name, ok, detail):
        results.append((name, ok, detail))
        print("  %s %s: %s" % ("PASS" if ok else "FAIL", name, detail), flush=True)

    for cname in [c for c in args.configs.split(",") if c]:
        if cname not in CONFIGS:
            print("FAIL: unknown config %s (have %s)" % (cname, ", ".join(CONFIGS)))
            return 1
        for dtype in [d for d in args.dtypes.split(",") if d]:
            if dtype not in ("fp32", "bf16"):
                print("FAIL: unknown dtype %s (fp32, bf16)" % dtype)
                return 1
            tag = "%s_%s" % (cname, dtype)
            print("\n== %s ==" % tag, flush=True)
            torch.manual_seed(0)
            arch = CONFIGS[cname].get("arch", "llama")
            if arch not in classes:
                target("%s config" % tag, False, "this transformers has no %s model" % arch)
                continue
            config_class, model_class = classes[arch]
            cfg = make_config(config_class, CONFIGS[cname])
            model = model_class(cfg).eval()
            with torch.no_grad():  # biases start at 0 and norms at 1: draw them so that they matter
                for n, p in model.named_parameters():
                    if n.endswith(".bias"):
                        p.normal_(0.0, 0.5)
                    elif n.endswith(("q_norm.weight", "k_norm.weight")):
                        p.normal_(1.0, 0.2)
                    elif arch.startswith("gemma") and n.endswith("norm.weight"):  # w of Gemma's (1 + w), 0 at init
                        p.normal_(0.0, 0.1)
            nparams = sum(p.numel() for p in model.parameters())
            # The rotary frequencies are a float buffer that .to(bfloat16) would round too (the
            # checkpoint does not hold them; rlx and transformers' loader compute them exactly):
            # keep them to restore in the f32 reference.
            freqs = {n: b.detach().clone() for n, b in model.named_buffers() if n.endswith("inv_freq")}
            if dtype == "bf16":
                model = model.to(torch.bfloat16)
            model_dir = os.path.join(work, tag)
            save(model, model_dir, "400MB" if nparams > 2e8 else None)
            print("saved %s: %.1fM parameters, files: %s" % (model_dir, nparams / 1e6, ", ".join(sorted(os.listdir(model_dir)))))
            ref_model = model.float()  # for bf16: the saved bf16 weights widened to f32, which is rlx's math
            for n, b in ref_model.named_buffers():
                if n in freqs:
                    b.copy_(freqs[n])
            gen = torch.Generator().manual_seed(1)
            tokens = torch.randint(0, cfg.vocab_size, (args.seq,), generator=gen).tolist()
            prompt, follow = tokens[:args.prompt], tokens[args.prompt:]
            with torch.no_grad():
                ref = ref_model(torch.tensor([tokens])).logits[0].float().numpy()
            ref_greedy = greedy(ref_model, torch, prompt, args.gen)
            hf_bf16 = None
            if dtype == "bf16":  # transformers' own bf16 run (on CUDA when there is one)
                dev = "cuda" if torch.cuda.is_available() else "cpu"
                native = copy.deepcopy(ref_model).to(torch.bfloat16).to(dev)
                with torch.no_grad():
                    hf_bf16 = native(torch.tensor([tokens], device=dev)).logits[0].float().cpu().numpy()
                del native
                e_hf = rel_err(hf_bf16, ref, np)
                print("  transformers bf16 (%s) against its f32 forward of the same weights: %.3g" % (dev, e_hf))
            for device in devices:
                try:
                    steps_f, seq_f, got_greedy, secs, speed = run_rlx(args, model_dir, device, prompt, follow, work,
                                                                       tag + "_" + device)
                except Exception as e:  # noqa: BLE001 - reported as a failed target
                    target("%s %s run" % (tag, device), False, str(e))
                    continue
                seq = np.load(seq_f)
                steps = np.load(steps_f)
                e_seq = rel_err(seq, ref, np)
                e_steps = rel_err(steps, ref[args.prompt - 1:], np)
                agree = 0
                for a, b in zip(got_greedy or [], ref_greedy):
                    if a != b:
                        break
                    agree += 1
                print("  rlx %s: %.1f s (%s)" % (device, secs, speed))
                target("%s %s logits, whole sequence (%d rows) vs transformers f32" % (tag, device, seq.shape[0]),
                       e_seq <= 1e-4, "max rel err %.3g (target 1e-4)" % e_seq)
                target("%s %s logits, KV-cache steps (%d rows) vs transformers f32" % (tag, device, steps.shape[0]),
                       e_steps <= 1e-4, "max rel err %.3g (target 1e-4)" % e_steps)
                target("%s %s greedy %d tokens" % (tag, device, args.gen), agree == args.gen,
                       "%d/%d agree before the first difference%s" % (
                           agree, args.gen, "" if agree == args.gen else
                           " (rlx %s, transformers %s)" % (got_greedy[agree:agree + 4] if got_greedy else None,
                                                           ref_greedy[agree:agree + 4])))
                if hf_bf16 is not None:
                    tol = max(2e-2, 2 * e_hf)
                    e_native = rel_err(seq, hf_bf16, np)
                    target("%s %s logits vs transformers bf16" % (tag, device), e_native <= tol,
                           "max rel err %.3g (bf16 tolerance %.3g)" % (e_native, tol))
                    try:  # bf16 activations: rlx's own bf16 model
                        steps_f, seq_f, _, secs, speed = run_rlx(args, model_dir, device, prompt, follow, work,
                                                                 tag + "_" + device + "_act16", "bf16")
                    except Exception as e:  # noqa: BLE001 - reported as a failed target
                        target("%s %s bf16 activations run" % (tag, device), False, str(e))
                        continue
                    e16_seq = rel_err(np.load(seq_f), ref, np)
                    e16_steps = rel_err(np.load(steps_f), ref[args.prompt - 1:], np)
                    print("  rlx %s, bf16 activations: %.1f s (%s)" % (device, secs, speed))
                    target("%s %s bf16 activations, whole sequence vs transformers f32" % (tag, device), e16_seq <= tol,
                           "max rel err %.3g (bf16 tolerance %.3g; transformers bf16 %.3g)" % (e16_seq, tol, e_hf))
                    target("%s %s bf16 activations, KV-cache steps vs transformers f32" % (tag, device),
                           e16_steps <= tol, "max rel err %.3g (bf16 tolerance %.3g)" % (e16_steps, tol))
            del model, ref_model
            if not args.keep and not args.work:
                shutil.rmtree(model_dir, ignore_errors=True)
    print("\n== summary ==")
    for name, ok, detail in results:
        print("%s %s: %s" % ("PASS" if ok else "FAIL", name, detail))
    failed = sum(1 for _, ok, _ in results if not ok)
    print("%d targets, %d failed" % (len(results), failed))
    if args.keep or args.work:
        print("work folder kept: %s" % work)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
