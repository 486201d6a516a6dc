"""Generate text with a Llama-family GGUF model, streaming the tokens.

    PYTHONPATH=build/release/python python3 examples/python/generate.py model.gguf "Once upon a time" -n 64

A small random model to try it with: build/release/bench_generate --save /tmp/m.gguf --n 1
(its output is random text)."""
import argparse
import sys

import rlx


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("prompt")
    ap.add_argument("-n", type=int, default=64, help="tokens to generate")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    gen = rlx.Generator(args.model, device=args.device)
    r = gen.generate(args.prompt, max_new_tokens=args.n, temperature=args.temperature, top_k=args.top_k,
                     top_p=args.top_p, seed=args.seed,
                     on_token=lambda i, piece: print(piece, end="", flush=True))
    print(f"\n{len(r['prompt_ids'])} prompt tokens at {r['prompt_tokens_per_second']:.1f} tokens/s, "
          f"{len(r['ids'])} generated at {r['decode_tokens_per_second']:.1f} tokens/s ({r['stop_reason']})",
          file=sys.stderr)


if __name__ == "__main__":
    main()
