"""Small models for the web bundle tests (tests/web/test_export_web.py): random weights, no downloads.

bert  a BERT-style encoder: int64 token ids (1, seq) with a symbolic `seq`, word and position
      embeddings, LayerNorm, one post-norm encoder layer (written-out attention with an additive
      mask row, erf GELU, written-out LayerNorms) and a tanh pooler over the first token.
cnn   a MobileNet-style CNN at 1x3x32x32 (conv + BatchNormalization + HardSwish/Relu, depthwise and
      pointwise convs, residual adds, global average pool, Gemm classifier).
mlp16 f16 weights of odd sizes (37 x 45, 45 x 23) that the WebGPU backend holds packed two per
      word, one decode-shaped row and a 5-row batch through them, a bias read as words, and a
      weight read by both a MatMul and an Add (kept as words); f32 in and out (Cast).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "python"))
import onnx_writer as ow  # noqa: E402
from bench_cpu_models import Net, encoder_layer, mobilenet  # noqa: E402


def bert(seq: int = 16, vocab: int = 50, hidden: int = 32, heads: int = 2, ffn: int = 64):
    m = Net(5)
    emb = m.init("word_emb", (0.5 * m.rng.standard_normal((vocab, hidden))).astype(np.float32))
    pos = m.init("pos_emb", (0.1 * m.rng.standard_normal((1, seq, hidden))).astype(np.float32))
    x = m.layer_norm(m.op("Add", [m.op("Gather", [emb, "input_ids"], axis=0), pos]), hidden)
    mask = np.zeros((1, 1, 1, seq), np.float32)
    mask[..., seq - 3:] = -10000.0  # the last three tokens are padding
    y = encoder_layer(m, x, hidden, heads, ffn, seq, m.init("mask", mask))
    m.nodes.append(ow.node("Identity", [y], ["last_hidden_state"]))
    first = m.op("Gather", [y, m.const(0, np.int64)], axis=1)
    m.nodes.append(ow.node("Tanh", [m.linear(first, hidden, hidden)], ["pooler_output"]))
    data = m.model([ow.value_info("input_ids", ow.INT64, [1, "seq"])],
                   [ow.value_info("last_hidden_state", ow.FLOAT, [1, "seq", hidden]),
                    ow.value_info("pooler_output", ow.FLOAT, [1, hidden])])
    ids = np.random.default_rng(21).integers(0, vocab, (1, seq)).astype(np.int64)
    return data, {"input_ids": ids}, {"seq": seq}


def cnn():
    data, inputs = mobilenet(32)
    return data, inputs, {}


def mlp16():
    m = Net(7)

    def half(shape, scale):
        return m.init("h", (scale * m.rng.standard_normal(shape)).astype(np.float16))

    w1, b1, w2, w3 = half((37, 45), 0.2), half((45,), 0.1), half((45, 23), 0.2), half((23, 23), 0.2)
    outs = []
    for name, rows in (("row", 1), ("batch", 5)):
        x = m.op("Cast", [f"x_{name}"], to=ow.FLOAT16)
        y = m.op("Relu", [m.op("Add", [m.op("MatMul", [x, w1]), b1])])
        y = m.op("MatMul", [y, w2])
        y = m.op("Add", [m.op("MatMul", [y, w3]), w3]) if rows == 1 else y  # w3: a matmul and an Add read it
        m.nodes.append(ow.node("Cast", [y], [f"y_{name}"], to=ow.FLOAT))
        outs.append(ow.value_info(f"y_{name}", ow.FLOAT, [23 if rows == 1 else rows, 23]))
    data = m.model([ow.value_info("x_row", ow.FLOAT, [1, 37]), ow.value_info("x_batch", ow.FLOAT, [5, 37])], outs)
    r = np.random.default_rng(3)
    return data, {"x_row": r.standard_normal((1, 37)).astype(np.float32),
                  "x_batch": r.standard_normal((5, 37)).astype(np.float32)}, {}


MODELS = {"bert": bert, "cnn": cnn, "mlp16": mlp16}
