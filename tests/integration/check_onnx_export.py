"""Trains each model kind for a few steps, exports it with `kestrel export`, checks the file with
onnx.checker (full_check) and runs it in onnxruntime on inputs of a batch size the model was not trained
with: its outputs must be Kestrel's to 1e-4 and its predictions (argmax) the same.

    PYTHONPATH=BUILD/python KESTREL_CLI=BUILD/bin/kestrel KESTREL_SOURCE_DIR=SOURCE python check_onnx_export.py
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime

import kestrel

SOURCE = pathlib.Path(os.environ["KESTREL_SOURCE_DIR"])
MODELS = SOURCE / "models"
CLI = os.environ["KESTREL_CLI"]

# The shipped run configs: MLPs, CNNs (batch norm, residual, average pooling), LSTM, RNN, GPT, Transformer.
SHIPPED = ["seeds_mlp", "linear_regression", "fashion_mlp", "small_cnn", "fashion_convnet", "residual_cnn",
           "lstm_fashion", "lstm_generator", "rnn_classifier", "transformer_classifier", "gpt_char", "transformer_lm"]

# Layer kinds and options no shipped model uses: GRU and bidirectional layers, a ReLU RNN, tanh, sigmoid,
# softmax and GELU layers, mean over time, stand-alone attention, a decoder layer with a causal memory
# whose keys, and its own, skip padding, post-norm blocks without biases, a layer norm without affine
# parameters.
EXTRA_MODELS = {
    "sequence_mix": ("lstm_generator", {
        "name": "sequence_mix", "input": {"shape": [24], "dtype": "i64"},
        "nodes": [
            {"name": "embed", "type": "embedding", "num_embeddings": 128, "embedding_dim": 16, "inputs": ["input"]},
            {"name": "gru", "type": "gru", "hidden_size": 12, "num_layers": 2, "bidirectional": True,
             "inputs": ["embed"]},
            {"name": "widen", "type": "linear", "out_features": 32, "inputs": ["gru"]},
            {"name": "squash", "type": "tanh", "inputs": ["widen"]},
            {"name": "pos", "type": "positional_encoding", "max_len": 64, "inputs": ["squash"]},
            {"name": "padding", "type": "key_padding_mask", "inputs": ["input"]},
            {"name": "attend", "type": "multihead_attention", "embed_dim": 32, "num_heads": 4, "causal": True,
             "inputs": ["pos"]},
            {"name": "decode", "type": "transformer_decoder_layer", "d_model": 32, "nhead": 4, "dim_feedforward": 48,
             "memory_causal": True, "bias": False, "inputs": ["attend", "pos", "padding", "padding"]},
            {"name": "encode", "type": "transformer_encoder_layer", "d_model": 32, "nhead": 2, "dim_feedforward": 40,
             "activation": "gelu", "inputs": ["decode"]},
            {"name": "norm", "type": "layernorm", "normalized_shape": 32, "elementwise_affine": False,
             "inputs": ["encode"]},
            {"name": "smooth", "type": "gelu", "inputs": ["norm"]},
            {"name": "scores", "type": "linear", "out_features": 128, "inputs": ["smooth"]}]}),
    "rnn_mix": ("rnn_classifier", {
        "name": "rnn_mix", "input": {"shape": [48], "dtype": "i64"},
        "layers": [
            {"type": "embedding", "num_embeddings": 128, "embedding_dim": 8, "padding_idx": 0},
            {"type": "rnn", "hidden_size": 10, "nonlinearity": "relu", "bidirectional": True},
            {"type": "lstm", "hidden_size": 6, "bias": False},
            {"type": "mean_over_time"},
            {"type": "linear", "out_features": 16},
            {"type": "sigmoid"},
            {"type": "linear", "out_features": 4},
            {"type": "softmax"}]}),
}


def write_config(folder, name):
    """A copy of a run config for a short run in `folder` (and its model, for the extra kinds)."""
    base, model = (EXTRA_MODELS[name] if name in EXTRA_MODELS else (name, None))
    config = json.loads((MODELS / f"{base}.train.json").read_text())
    config.pop("checkpoint", None)
    if model is None:
        config["model"] = str(MODELS / config["model"])
    else:
        (folder / f"{name}.json").write_text(json.dumps(model))
        config["model"] = str(folder / f"{name}.json")
    if config["data"].get("path", "").startswith(".."):
        config["data"]["path"] = str((MODELS / config["data"]["path"]).resolve())
    config.update({"epochs": 1, "max_steps": 3, "batch_size": 8, "out": str(folder / f"{name}-run")})
    config.get("eval", {}).update({"batch_size": 64})
    path = folder / f"{name}.train.json"
    path.write_text(json.dumps(config))
    return path


def sample_inputs(graph_input, rng):
    dims = [d.dim_value for d in graph_input.type.tensor_type.shape.dim[1:]]
    assert graph_input.type.tensor_type.shape.dim[0].dim_param == "N", "the batch dimension is not dynamic"
    if graph_input.type.tensor_type.elem_type == onnx.TensorProto.INT64:
        tokens = rng.integers(1, 100, size=[5] + dims, dtype=np.int64)  # every model's vocabulary has 100 ids
        for i in range(5):  # left padding with id 0, none to most of the sequence (what key-padding masks skip)
            tokens[i, :i * dims[0] // 6] = 0
        return tokens
    return rng.standard_normal([5] + dims).astype(np.float32)


def check(name, folder, rng):
    config_path = write_config(folder, name)
    config = kestrel.RunConfig.load(str(config_path))
    config.train_subset, config.test_subset, config.backends = 64, 64, ["cpu"]
    trainer = kestrel.Trainer(config)
    trainer.fit()
    run = folder / f"{name}-run"
    onnx_path = folder / f"{name}.onnx"
    subprocess.run([CLI, "export", str(config_path), "--checkpoint", str(run), "--onnx", str(onnx_path),
                    "--backend", "cpu", "--train-subset", "64", "--test-subset", "64"], check=True,
                   stdout=subprocess.DEVNULL)
    model = onnx.load(str(onnx_path))
    onnx.checker.check_model(model, full_check=True)  # also infers and checks every value's shape and type
    x = sample_inputs(model.graph.input[0], rng)
    expected = trainer.predict(x)
    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = session.run(["output"], {"input": x})[0]
    assert got.shape == expected.shape, f"{name}: onnxruntime gives {got.shape}, Kestrel {expected.shape}"
    error = float(np.max(np.abs(got - expected)))
    assert error <= 1e-4, f"{name}: outputs differ by up to {error:.3g}"
    # Predictions: the same class wherever Kestrel's top two scores are told apart by more than the tolerance.
    top2 = np.sort(expected, axis=-1)[..., -2:]
    decided = (top2[..., 1] - top2[..., 0]) > 1e-4
    same = np.argmax(got, axis=-1) == np.argmax(expected, axis=-1)
    assert same[decided].all(), f"{name}: {int((~same[decided]).sum())} predictions differ"
    ops = sorted({node.op_type for node in model.graph.node})
    print(f"{name:18s} max |onnxruntime - kestrel| {error:.2e}, {int(decided.sum())}/{decided.size} predictions "
          f"compared, all equal; ops: {', '.join(ops)}")


def main():
    rng = np.random.default_rng(7)
    names = sys.argv[1:] or SHIPPED + list(EXTRA_MODELS)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            check(name, pathlib.Path(tmp), rng)
    print(f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}: {len(names)} models exported and checked")


if __name__ == "__main__":
    main()
