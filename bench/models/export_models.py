#!/usr/bin/env python3
"""Exports the real-model set: small random-weight PyTorch models written by the two ONNX exporters.

Each model is exported with the TorchScript exporter (`dynamo=False`, dynamic axes) and with the
dynamo exporter (`dynamo=True`, dynamic shapes) where that works, into
    OUT/test_<model>_<exporter>/model.onnx
    OUT/test_<model>_<exporter>/test_data_set_<k>/{input,output}_<i>.pb
the layout of the ONNX backend test cases, so `rlx conformance OUT` runs them. Every data set has
other sizes for the dynamic dims; its expected outputs are ONNX Runtime's (CPU) on that file, and
the script checks them against PyTorch's own outputs. OUT/MANIFEST.json records versions, sizes,
the dims each set uses, the ORT-vs-PyTorch error, and the exports that failed (with the reason).

Needs torch, torchvision, transformers, onnx, onnxscript (dynamo) and onnxruntime; run on the GPU
machine (CPU only is used):  python3 bench/models/export_models.py --out tests/models/onnx
"""
import argparse
import json
import os
import shutil
import sys
import traceback

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn as nn
from onnx import numpy_helper

torch.manual_seed(0)
RNG = np.random.default_rng(0)


def _randomize_batchnorm(model):
    # Fresh BatchNorm layers have mean 0 / var 1 / weight 1 / bias 0, which folds to nothing:
    # give them trained-looking statistics.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return model


def _ids(b, s, vocab):
    return torch.from_numpy(RNG.integers(0, vocab, size=(b, s), dtype=np.int64))


def _mask(b, s):
    m = np.ones((b, s), dtype=np.int64)
    for i in range(1, b):  # rows after the first end in padding
        m[i, s - min(i * 2, s - 1):] = 0
    return torch.from_numpy(m)


class _Outputs(nn.Module):
    """Calls a transformers model with named inputs (no cache) and returns the named outputs as a
    tuple; the subclasses give the exporters an explicit argument list."""

    def __init__(self, model, arg_names, keys, no_cache):
        super().__init__()
        self.model, self.arg_names, self.keys, self.no_cache = model.eval(), arg_names, keys, no_cache

    def call(self, args):
        kwargs = dict(zip(self.arg_names, args))
        if self.no_cache:
            kwargs["use_cache"] = False
        out = self.model(**kwargs)
        return tuple(out[k] for k in self.keys)


class _Outputs1(_Outputs):
    def forward(self, a):
        return self.call([a])


class _Outputs2(_Outputs):
    def forward(self, a, b):
        return self.call([a, b])


class _Outputs3(_Outputs):
    def forward(self, a, b, c):
        return self.call([a, b, c])


def _hf(model, arg_names, keys, no_cache=False):
    cls = {1: _Outputs1, 2: _Outputs2, 3: _Outputs3}[len(arg_names)]
    return cls(model, arg_names, keys, no_cache).eval()


def bert():
    from transformers import BertConfig, BertModel
    cfg = BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=64)
    m = _hf(BertModel(cfg), ["input_ids", "attention_mask", "token_type_ids"],
            ["last_hidden_state", "pooler_output"])

    def inputs(b, s):
        return [_ids(b, s, 512), _mask(b, s), torch.from_numpy(RNG.integers(0, 2, (b, s), dtype=np.int64))]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
            "token_type_ids": {0: "batch", 1: "seq"}}
    return m, ["input_ids", "attention_mask", "token_type_ids"], ["last_hidden_state", "pooler_output"], \
        axes, [inputs(1, 7), inputs(3, 16)]


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=512, n_positions=64, n_embd=64, n_layer=2, n_head=4)
    m = _hf(GPT2LMHeadModel(cfg), ["input_ids", "attention_mask"], ["logits"], no_cache=True)

    def inputs(b, s):
        return [_ids(b, s, 512), _mask(b, s)]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    return m, ["input_ids", "attention_mask"], ["logits"], axes, [inputs(1, 5), inputs(2, 12)]


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    m = _hf(LlamaForCausalLM(cfg), ["input_ids", "attention_mask"], ["logits"], no_cache=True)

    def inputs(b, s):
        return [_ids(b, s, 512), _mask(b, s)]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    return m, ["input_ids", "attention_mask"], ["logits"], axes, [inputs(1, 6), inputs(2, 11)]


def vit():
    from transformers import ViTConfig, ViTModel
    cfg = ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=128, num_channels=3)
    m = _hf(ViTModel(cfg), ["pixel_values"], ["last_hidden_state", "pooler_output"])

    def inputs(b):
        return [torch.randn(b, 3, 32, 32)]
    return m, ["pixel_values"], ["last_hidden_state", "pooler_output"], {"pixel_values": {0: "batch"}}, \
        [inputs(1), inputs(3)]


def whisper_encoder():
    from transformers import WhisperConfig, WhisperModel
    cfg = WhisperConfig(d_model=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128,
                        decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=128, num_mel_bins=40,
                        max_source_positions=32, max_target_positions=32, vocab_size=256, pad_token_id=0,
                        bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    enc = WhisperModel(cfg).get_encoder()
    m = _hf(enc, ["input_features"], ["last_hidden_state"])

    def inputs(b):
        return [torch.randn(b, 40, 64)]  # the encoder takes exactly 2 * max_source_positions frames
    return m, ["input_features"], ["last_hidden_state"], {"input_features": {0: "batch"}}, [inputs(1), inputs(2)]


def resnet():
    from torchvision.models.resnet import BasicBlock

    def down(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 1, stride=2, bias=False), nn.BatchNorm2d(cout))

    class SmallResNet(nn.Module):
        # torchvision's ResNet layout (7x7 stem, max pool, BasicBlocks, average pool, fc) at widths
        # 16/32/64 so the file stays small.
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                                      nn.MaxPool2d(3, 2, 1))
            self.layers = nn.Sequential(BasicBlock(16, 16), BasicBlock(16, 16),
                                        BasicBlock(16, 32, 2, down(16, 32)), BasicBlock(32, 32),
                                        BasicBlock(32, 64, 2, down(32, 64)), BasicBlock(64, 64))
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))

    m = _randomize_batchnorm(SmallResNet()).eval()
    axes = {"image": {0: "batch", 2: "height", 3: "width"}}
    return m, ["image"], ["logits"], axes, [[torch.randn(1, 3, 64, 64)], [torch.randn(2, 3, 96, 80)]]


def mobilenet_v3():
    from torchvision.models.mobilenetv3 import MobileNetV3, _mobilenet_v3_conf
    setting, last = _mobilenet_v3_conf("mobilenet_v3_small", width_mult=0.5)
    m = _randomize_batchnorm(MobileNetV3(setting, last, num_classes=10)).eval()
    axes = {"image": {0: "batch", 2: "height", 3: "width"}}
    return m, ["image"], ["logits"], axes, [[torch.randn(1, 3, 96, 96)], [torch.randn(2, 3, 128, 112)]]


def lstm():
    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(16, 32, num_layers=2, batch_first=True, bidirectional=True)
            self.out = nn.Linear(64, 8)

        def forward(self, x):
            y, _ = self.rnn(x)
            return self.out(y)

    m = Tagger().eval()
    axes = {"features": {0: "batch", 1: "seq"}}
    return m, ["features"], ["scores"], axes, [[torch.randn(1, 9, 16)], [torch.randn(3, 20, 16)]]


MODELS = {"bert": bert, "gpt2": gpt2, "llama": llama, "vit": vit, "whisper_encoder": whisper_encoder,
          "resnet": resnet, "mobilenet_v3": mobilenet_v3, "lstm": lstm}


def _dynamic_shapes(names, axes):
    from torch.export import Dim
    dims = {}
    shapes = []
    for n in names:
        spec = {}
        for ax, dname in axes.get(n, {}).items():
            if dname not in dims:
                dims[dname] = Dim(dname, min=1, max=4096)
            spec[ax] = dims[dname]
        shapes.append(spec)
    return tuple(shapes)


def export(model, exporter, path, in_names, out_names, axes, example):
    if exporter == "torchscript":
        dyn = dict(axes)
        torch.onnx.export(model, tuple(example), path, dynamo=False, opset_version=17, input_names=in_names,
                          output_names=out_names, dynamic_axes=dyn)
    else:
        prog = torch.onnx.export(model, tuple(example), dynamo=True, input_names=in_names, output_names=out_names,
                                 dynamic_shapes=_dynamic_shapes(in_names, axes), optimize=True)
        prog.save(path, external_data=False)
    onnx.checker.check_model(onnx.load(path))


def write_sets(case_dir, path, model, in_names, sets):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    graph_inputs = [i.name for i in sess.get_inputs()]
    graph_outputs = [o.name for o in sess.get_outputs()]
    records = []
    for k, inputs in enumerate(sets):
        feed = {n: t.numpy() for n, t in zip(in_names, inputs) if n in graph_inputs}
        got = sess.run(None, feed)
        with torch.no_grad():
            ref = model(*inputs)
        ref = ref if isinstance(ref, (tuple, list)) else (ref,)
        err = 0.0
        for g, r in zip(got, ref):
            r = r.numpy()
            err = max(err, float(np.max(np.abs(g - r)) / max(1e-6, float(np.max(np.abs(r))))))
        d = os.path.join(case_dir, f"test_data_set_{k}")
        os.makedirs(d, exist_ok=True)
        for i, n in enumerate(graph_inputs):
            t = numpy_helper.from_array(feed[n], n)
            open(os.path.join(d, f"input_{i}.pb"), "wb").write(t.SerializeToString())
        for i, (n, g) in enumerate(zip(graph_outputs, got)):
            t = numpy_helper.from_array(g, n)
            open(os.path.join(d, f"output_{i}.pb"), "wb").write(t.SerializeToString())
        records.append({"shapes": {n: list(feed[n].shape) for n in graph_inputs}, "ort_vs_torch_rel": err})
    return records


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma-separated model names")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import transformers
    import torchvision
    manifest = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                             "torchvision": torchvision.__version__, "onnx": onnx.__version__,
                             "onnxruntime": ort.__version__},
                "cases": {}, "failed": {}}
    names = [n for n in MODELS if not args.only or n in args.only.split(",")]
    for name in names:
        for exporter in ("torchscript", "dynamo"):
            case = f"test_{name}_{exporter}"
            case_dir = os.path.join(args.out, case)
            shutil.rmtree(case_dir, ignore_errors=True)
            os.makedirs(case_dir)
            path = os.path.join(case_dir, "model.onnx")
            try:
                model, in_names, out_names, axes, sets = MODELS[name]()
                # torch.export specializes a dim whose example value is 1: the dynamo export
                # traces the larger set.
                export(model, exporter, path, in_names, out_names, axes, sets[0] if exporter == "torchscript" else sets[-1])
                recs = write_sets(case_dir, path, model, in_names, sets)
                worst = max(r["ort_vs_torch_rel"] for r in recs)
                if worst > 1e-3:
                    raise RuntimeError(f"ONNX Runtime and PyTorch disagree on the export: {worst:.2e}")
                m = onnx.load(path)
                manifest["cases"][case] = {
                    "bytes": os.path.getsize(path), "opset": max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")),
                    "nodes": len(m.graph.node), "op_types": sorted({n.op_type for n in m.graph.node}), "sets": recs}
                print(f"{case}: {os.path.getsize(path)} bytes, {len(m.graph.node)} nodes, ort/torch {worst:.1e}", flush=True)
            except Exception as e:  # noqa: BLE001 - record and go on with the next export
                shutil.rmtree(case_dir, ignore_errors=True)
                manifest["failed"][case] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
                print(f"{case}: FAILED {manifest['failed'][case]}", flush=True)
                traceback.print_exc(limit=3)
    with open(os.path.join(args.out, "MANIFEST.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    print(json.dumps(manifest["failed"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
