"""rlx.Generator: a tiny random Llama GGUF written by bench_generate (next to the rlx CLI), greedy
generation that is deterministic and does not recompile per token, streaming with a callback that
can stop the run or raise, the tokenizer, and errors."""
import os
import subprocess
from pathlib import Path

import pytest

import rlx


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory, rlx_cli) -> str:
    tool = Path(rlx_cli).with_name("bench_generate")
    if not tool.exists():
        pytest.skip(f"no bench_generate next to {rlx_cli} to write the test model")
    path = tmp_path_factory.mktemp("gen") / "tiny.gguf"
    subprocess.run([str(tool), "--layers", "2", "--hidden", "64", "--ffn", "128", "--vocab", "400", "--heads", "4",
                    "--kv-heads", "2", "--prompt", "4", "--n", "2", "--ctx", "64", "--threads", "1",
                    "--save", str(path)], check=True, capture_output=True)
    return str(path)


def test_greedy_is_deterministic_and_compiles_once_per_length(tiny_gguf):
    g = rlx.Generator(tiny_gguf, max_ctx=64, threads=1)
    assert g.has_tokenizer and g.max_ctx == 64 and g.vocab_size == 400
    a = g.generate("the quick brown fox", max_new_tokens=6)
    compiled = g.compile_count
    b = g.generate("the quick brown fox", max_new_tokens=20)
    assert b["ids"][:len(a["ids"])] == a["ids"]
    assert a["prompt_ids"] == g.encode("the quick brown fox")
    assert b["stop_reason"] in ("length", "end of generation")
    if b["stop_reason"] == "length":
        assert len(b["ids"]) == 20 and b["decode_steps"] == 19
    assert g.compile_count == compiled  # more tokens, no new variant
    assert g.position == len(b["prompt_ids"]) + len(b["ids"]) - (1 if b["stop_reason"] == "length" else 0)
    assert b["text"] == g.decode(b["ids"])
    assert b["decode_tokens_per_second"] > 0


def test_prompt_as_ids_matches_prompt_as_text(tiny_gguf):
    g = rlx.Generator(tiny_gguf, max_ctx=64, threads=1)
    ids = g.encode("hello there")
    assert g.generate(ids, max_new_tokens=5)["ids"] == g.generate("hello there", max_new_tokens=5)["ids"]


def test_callback_streams_stops_and_raises(tiny_gguf):
    g = rlx.Generator(tiny_gguf, max_ctx=64, threads=1)
    seen = []
    r = g.generate("abc", max_new_tokens=5, on_token=lambda i, piece: seen.append((i, piece)))
    assert [i for i, _ in seen] == r["ids"]
    assert all(isinstance(p, str) for _, p in seen)
    stopped = g.generate("abc", max_new_tokens=5, on_token=lambda i, piece: False)
    assert len(stopped["ids"]) == 1 and stopped["stop_reason"] == "callback"

    def boom(i, piece):
        raise ValueError("stop from Python")

    with pytest.raises(ValueError, match="stop from Python"):
        g.generate("abc", max_new_tokens=5, on_token=boom)


def test_sampling_is_seeded(tiny_gguf):
    g = rlx.Generator(tiny_gguf, max_ctx=64, threads=1)
    kw = dict(max_new_tokens=8, temperature=1.0, top_k=50, top_p=0.9)
    first = g.generate("xyz", seed=3, **kw)
    assert first["ids"] == g.generate("xyz", seed=3, **kw)["ids"]
    # Without the device's candidates every pick is the host's, from the same draws.
    whole = rlx.Generator(tiny_gguf, max_ctx=64, threads=1, sample_candidates=0).generate("xyz", seed=3, **kw)
    assert whole["ids"] == first["ids"]
    assert whole["host_picks"] == len(whole["ids"])


def test_errors(tiny_gguf, tmp_path):
    with pytest.raises(rlx.Error):
        rlx.Generator(str(tmp_path / "missing.gguf"))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + bytes(8))
    with pytest.raises(rlx.Error):
        rlx.Generator(str(bad))
    g = rlx.Generator(tiny_gguf, max_ctx=64, threads=1)
    with pytest.raises(rlx.Error):
        g.generate("x", temperature=1.0, top_p=1.5)
    with pytest.raises(rlx.Error):
        rlx.Generator(tiny_gguf, device="no-such-device")


def test_generate_example(tiny_gguf):
    import sys
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    script = Path(__file__).resolve().parents[2] / "examples" / "python" / "generate.py"
    out = subprocess.run([sys.executable, str(script), tiny_gguf, "hello", "-n", "6"], capture_output=True, text=True,
                         env=env)
    assert out.returncode == 0, out.stderr
    assert "prompt tokens at" in out.stderr and "generated at" in out.stderr


def test_bf16_activations(tiny_gguf):
    g = rlx.Generator(tiny_gguf, max_ctx=64, threads=1, activations="bf16")
    r = g.generate("the quick brown fox", max_new_tokens=4)
    assert len(r["ids"]) >= 1 and r["decode_tokens_per_second"] >= 0
    with pytest.raises(rlx.Error, match="activations must be f32, f16 or bf16"):
        rlx.Generator(tiny_gguf, max_ctx=64, threads=1, activations="i32")
    with pytest.raises(rlx.Error):
        rlx.Generator(tiny_gguf, max_ctx=64, threads=1, activations="no-such-dtype")


def test_generate_batch_matches_generate(tiny_gguf):
    one = rlx.Generator(tiny_gguf, max_ctx=64, threads=1)
    many = rlx.Generator(tiny_gguf, max_ctx=64, threads=1, batch=3)
    assert many.batch == 3 and one.batch == 1
    prompts = ["the quick brown fox", "hi", one.encode("a much longer prompt than the others, with commas")]
    seen = []
    got = many.generate_batch(prompts, max_new_tokens=6, on_token=lambda b, i, piece: seen.append((b, i)))
    assert len(got) == 3
    for b, p in enumerate(prompts):
        want = one.generate(p, max_new_tokens=6)
        assert got[b]["ids"] == want["ids"] and got[b]["stop_reason"] == want["stop_reason"]
        assert [i for s, i in seen if s == b] == got[b]["ids"]
    stopped = many.generate_batch(prompts[:2], max_new_tokens=6, on_token=lambda b, i, piece: b != 1)
    assert len(stopped[1]["ids"]) == 1 and stopped[1]["stop_reason"] == "callback"
    with pytest.raises(rlx.Error, match="1 to 3 prompts"):
        many.generate_batch(prompts + ["x"], max_new_tokens=2)
    with pytest.raises(rlx.Error, match="generate_batch"):
        many.generate("x", max_new_tokens=2)
