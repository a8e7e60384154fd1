"""The PyTorch twins of Kestrel's JSON models: builds a torch.nn.Module from a Kestrel model file with
the same layer semantics and parameter names (<layer name>.weight / .bias), and reads Kestrel's
safetensors checkpoints and Debian's Fashion-MNIST files without extra packages."""
import gzip
import json
import pathlib
import struct

import numpy as np
import torch
from torch import nn

_DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64, "U8": np.uint8}


def _pair(value):
    return tuple(value) if isinstance(value, (list, tuple)) else (value, value)


class KestrelModel(nn.Module):
    """Runs the layer graph of a Kestrel model file; parameters are keyed like Kestrel's."""

    def __init__(self, model_file):
        super().__init__()
        spec = json.loads(pathlib.Path(model_file).read_text())
        self.input_shape = spec["input"]["shape"]
        items = spec.get("layers") or spec["nodes"]
        self.order, self.inputs = [], {}
        self.layers = nn.ModuleDict()
        shape = [1] + list(self.input_shape)
        shapes = {"input": shape}
        previous = "input"
        for index, item in enumerate(items):
            name = item.get("name", str(index))
            sources = item.get("inputs", [previous])
            in_shape = shapes[sources[0]]
            module = self._make(item, in_shape)
            self.layers[name] = module
            self.order.append(name)
            self.inputs[name] = sources
            with torch.no_grad():
                probe = [torch.zeros(shapes[s]) for s in sources]
                module.eval()
                out = module(*probe)
            shapes[name] = list(out.shape)
            previous = name
        self.output = spec.get("output", self.order[-1])
        self.shapes = shapes  # per layer name: its output shape for a batch of one

    @staticmethod
    def _make(item, in_shape):
        kind = item["type"]
        if kind == "linear":
            return nn.Linear(in_shape[1], item["out_features"], bias=item.get("bias", True))
        if kind == "conv2d":
            return nn.Conv2d(in_shape[1], item["out_channels"], _pair(item["kernel_size"]), _pair(item.get("stride", 1)),
                             _pair(item.get("padding", 0)), _pair(item.get("dilation", 1)), bias=item.get("bias", True))
        if kind == "maxpool2d":
            k = _pair(item["kernel_size"])
            return nn.MaxPool2d(k, _pair(item.get("stride", k)), _pair(item.get("padding", 0)), _pair(item.get("dilation", 1)))
        if kind == "avgpool2d":
            k = _pair(item["kernel_size"])
            return nn.AvgPool2d(k, _pair(item.get("stride", k)), _pair(item.get("padding", 0)))
        if kind == "batchnorm2d":
            return nn.BatchNorm2d(in_shape[1], eps=item.get("eps", 1e-5), momentum=item.get("momentum", 0.1))
        if kind == "dropout":
            return nn.Dropout(item.get("p", 0.5))
        if kind == "softmax":
            return nn.Softmax(dim=-1)
        simple = {"flatten": nn.Flatten(), "relu": nn.ReLU(), "gelu": nn.GELU(), "tanh": nn.Tanh(), "sigmoid": nn.Sigmoid()}
        if kind in simple:
            return simple[kind]
        if kind == "add":
            return _Add()
        raise ValueError(f"unknown layer type {kind}")

    def forward(self, x):
        values = {"input": x}
        for name in self.order:
            values[name] = self.layers[name](*[values[s] for s in self.inputs[name]])
        return values[self.output]

    def load_kestrel_state(self, tensors):
        """Copies Kestrel's named tensors (name -> numpy array) into the matching parameters/buffers."""
        state = {}
        for key in self.state_dict():
            name = key[len("layers."):]
            if name.endswith("num_batches_tracked"):
                continue
            state[key] = torch.from_numpy(np.ascontiguousarray(tensors[name]))
        missing = self.load_state_dict(state, strict=False)
        assert not missing.unexpected_keys, missing

    def kestrel_state(self):
        return {key[len("layers."):]: value.detach().cpu().numpy() for key, value in self.state_dict().items()
                if not key.endswith("num_batches_tracked")}


class _Add(nn.Module):
    def forward(self, a, b):
        return a + b


def read_safetensors(path):
    data = pathlib.Path(path).read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    body = data[8 + length:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        tensors[name] = np.frombuffer(body[begin:end], dtype=_DTYPES[entry["dtype"]]).reshape(entry["shape"])
    return tensors, header.get("__metadata__", {})


def read_idx(path):
    raw = gzip.open(path, "rb").read()
    magic, count = struct.unpack(">II", raw[:8])
    if magic == 0x803:
        rows, cols = struct.unpack(">II", raw[8:16])
        return np.frombuffer(raw[16:], dtype=np.uint8).reshape(count, 1, rows, cols)
    return np.frombuffer(raw[8:], dtype=np.uint8).astype(np.int64)


def fashion_mnist_test(folder="/usr/share/datasets/fashion-mnist", mean=0.2860, std=0.3530):
    images = read_idx(f"{folder}/t10k-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    labels = read_idx(f"{folder}/t10k-labels-idx1-ubyte.gz")
    return (images - mean) / std, labels
