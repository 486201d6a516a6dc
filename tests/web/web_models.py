"""Small models for the web bundle tests (tests/web/test_export_web.py): random weights, no downloads.

bert  a BERT-style encoder: int64 token ids (1, seq) with a symbolic `seq`, word and position
      embeddings, LayerNorm, one post-norm encoder layer (written-out attention with an additive
      mask row, erf GELU, written-out LayerNorms) and a tanh pooler over the first token.
cnn   a MobileNet-style CNN at 1x3x32x32 (conv + BatchNormalization + HardSwish/Relu, depthwise and
      pointwise convs, residual adds, global average pool, Gemm classifier).
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


MODELS = {"bert": bert, "cnn": cnn}
