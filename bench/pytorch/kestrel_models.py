"""The PyTorch twins of Kestrel's JSON models: builds a torch.nn.Module from a Kestrel model file with
the same layer semantics and parameter names (<layer name>.weight / .bias, torch's own names inside
recurrent and Transformer layers), and reads Kestrel's safetensors checkpoints, Debian's Fashion-MNIST
files and text corpora (as Kestrel windows them) without extra packages."""
import fnmatch
import gzip
import json
import math
import os
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
        self.tokens = spec["input"].get("dtype") == "i64"
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
                probe = [torch.zeros(shapes[s], dtype=torch.long if s == "input" and self.tokens else torch.float32)
                         for s in sources]
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
            return nn.Linear(in_shape[-1], item["out_features"], bias=item.get("bias", True))
        sequence = _make_sequence_layer(item, in_shape)
        if sequence is not None:
            return sequence
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
        if kind == "flatten":
            return nn.Flatten(item.get("start_dim", 1), item.get("end_dim", -1))
        simple = {"relu": nn.ReLU(), "gelu": nn.GELU(), "tanh": nn.Tanh(), "sigmoid": nn.Sigmoid()}
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
            state[key] = torch.from_numpy(np.array(tensors[name]))  # a writable copy
        missing = self.load_state_dict(state, strict=False)
        assert not missing.unexpected_keys, missing

    def kestrel_state(self):
        return {key[len("layers."):]: value.detach().cpu().numpy() for key, value in self.state_dict().items()
                if not key.endswith("num_batches_tracked")}


class _Add(nn.Module):
    def forward(self, a, b):
        return a + b


def causal_mask(queries, keys):
    """Kestrel's causal mask: query i sees keys up to (keys - queries) + i."""
    return torch.triu(torch.full((queries, keys), float("-inf")), diagonal=keys - queries + 1)


def _output_only(cls):
    """nn.RNN/LSTM/GRU returning only the top layer's output at every step, as Kestrel's layers do."""
    class OutputOnly(cls):
        def forward(self, x):
            return super().forward(x)[0]
    return OutputOnly


class _LastStep(nn.Module):
    def forward(self, x):
        return x[:, -1]


class _MeanOverTime(nn.Module):
    def forward(self, x):
        return x.mean(1)


class _LearnedPositions(nn.Module):
    def __init__(self, max_len, width):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(max_len, width))

    def forward(self, x):
        return x + self.weight[: x.shape[1]]


class _SinusoidalPositions(nn.Module):
    """The PyTorch tutorial's PositionalEncoding, batch-first (Kestrel's positional_encoding)."""
    def __init__(self, max_len, width):
        super().__init__()
        position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
        rate = torch.pow(10000.0, -torch.arange(0, width, 2, dtype=torch.float64) / width)
        table = torch.zeros(max_len, width, dtype=torch.float64)
        table[:, 0::2] = torch.sin(position * rate)
        table[:, 1::2] = torch.cos(position * rate[: width // 2])
        self.register_buffer("table", table.float(), persistent=False)

    def forward(self, x):
        return x + self.table[: x.shape[1]]


class _KeyPaddingMask(nn.Module):
    """Kestrel's key_padding_mask layer: (N, T) tokens -> (N, T), 1.0 where the token is padding_idx."""
    def __init__(self, padding_idx):
        super().__init__()
        self.padding_idx = padding_idx

    def forward(self, tokens):
        return (tokens == self.padding_idx).float()


def _padding(mask):
    """torch's key_padding_mask (True = ignore) from a Kestrel key-padding input, or None without one."""
    return None if mask is None else mask.bool()


class _SelfAttention(nn.MultiheadAttention):
    def __init__(self, width, heads, dropout, bias, causal):
        super().__init__(width, heads, dropout=dropout, bias=bias, batch_first=True)
        self.causal = causal

    def forward(self, x, padding=None):
        mask = causal_mask(x.shape[1], x.shape[1]) if self.causal else None
        return super().forward(x, x, x, key_padding_mask=_padding(padding), attn_mask=mask, need_weights=False)[0]


def _block_args(item):
    return dict(d_model=item["d_model"], nhead=item["nhead"], dim_feedforward=item.get("dim_feedforward", 2048),
                dropout=item.get("dropout", 0.1), activation=item.get("activation", "relu"),
                layer_norm_eps=item.get("layer_norm_eps", 1e-5), batch_first=True,
                norm_first=item.get("norm_first", False), bias=item.get("bias", True))


class _EncoderLayer(nn.TransformerEncoderLayer):
    def __init__(self, item):
        super().__init__(**_block_args(item))
        self.causal = item.get("causal", False)

    def forward(self, x, padding=None):
        mask = causal_mask(x.shape[1], x.shape[1]) if self.causal else None
        return super().forward(x, src_mask=mask, src_key_padding_mask=_padding(padding), is_causal=self.causal)


class _DecoderLayer(nn.TransformerDecoderLayer):
    def __init__(self, item):
        super().__init__(**_block_args(item))
        self.memory_causal = item.get("memory_causal", False)

    def forward(self, target, memory, padding=None, target_padding=None):
        memory_mask = causal_mask(target.shape[1], memory.shape[1]) if self.memory_causal else None
        return super().forward(target, memory, tgt_mask=causal_mask(target.shape[1], target.shape[1]),
                               memory_mask=memory_mask, memory_key_padding_mask=_padding(padding),
                               tgt_key_padding_mask=_padding(target_padding), tgt_is_causal=True)


class _Transformer(nn.Transformer):
    def __init__(self, item):
        super().__init__(num_encoder_layers=item.get("num_encoder_layers", 6),
                         num_decoder_layers=item.get("num_decoder_layers", 6), **_block_args(item))
        self.causal = item.get("causal", False)

    def forward(self, source, target, padding=None, target_padding=None):
        s, t = source.shape[1], target.shape[1]
        mask = (lambda q, k: causal_mask(q, k)) if self.causal else (lambda q, k: None)
        return super().forward(source, target, src_mask=mask(s, s), tgt_mask=causal_mask(t, t), memory_mask=mask(t, s),
                               src_key_padding_mask=_padding(padding), memory_key_padding_mask=_padding(padding),
                               tgt_key_padding_mask=_padding(target_padding), src_is_causal=self.causal,
                               tgt_is_causal=True)


def _make_sequence_layer(item, in_shape):
    kind = item["type"]
    if kind == "embedding":
        # padding_idx as Kestrel reads it, which is torch's rule: absent for none, negative from the end.
        return nn.Embedding(item["num_embeddings"], item["embedding_dim"], padding_idx=item.get("padding_idx"))
    if kind in ("rnn", "lstm", "gru"):
        cls = _output_only({"rnn": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU}[kind])
        extra = {"nonlinearity": item.get("nonlinearity", "tanh")} if kind == "rnn" else {}
        return cls(in_shape[-1], item["hidden_size"], item.get("num_layers", 1), bias=item.get("bias", True),
                   batch_first=True, dropout=item.get("dropout", 0.0), bidirectional=item.get("bidirectional", False),
                   **extra)
    if kind == "last_step":
        return _LastStep()
    if kind == "mean_over_time":
        return _MeanOverTime()
    if kind == "layernorm":
        return nn.LayerNorm(item["normalized_shape"], eps=item.get("eps", 1e-5),
                            elementwise_affine=item.get("elementwise_affine", True))
    if kind == "positional_embedding":
        return _LearnedPositions(item["max_len"], item["embedding_dim"])
    if kind == "positional_encoding":
        return _SinusoidalPositions(item.get("max_len", 5000), in_shape[-1])
    if kind == "key_padding_mask":
        return _KeyPaddingMask(item.get("padding_idx", 0))
    if kind == "multihead_attention":
        return _SelfAttention(item["embed_dim"], item["num_heads"], item.get("dropout", 0.0), item.get("bias", True),
                              item.get("causal", False))
    if kind == "transformer_encoder_layer":
        return _EncoderLayer(item)
    if kind == "transformer_decoder_layer":
        return _DecoderLayer(item)
    if kind == "transformer":
        return _Transformer(item)
    return None


def _llround(x):
    return int(math.floor(x + 0.5))


def text_windows(path, exclude=(), context=128, validation_fraction=0.1):
    """A text corpus as Kestrel's "dataset": "text" reads it (engine/src/data/text_corpus.cpp): the files
    by name (links and excluded names skipped), characters in code-point order, each file's tail held
    out, consecutive windows labelled with the next character. Returns (vocabulary, (x, y) train,
    (x, y) validation) with x, y int64 arrays (samples, context)."""
    path = pathlib.Path(path)
    if path.is_dir():
        files = sorted(str(p) for p in path.iterdir() if p.is_file() and not p.is_symlink()
                       and not any(fnmatch.fnmatchcase(p.name, pattern) for pattern in exclude))
    else:
        files = [str(path)]
    texts = [pathlib.Path(f).read_bytes().decode("utf-8") for f in files]
    vocabulary = sorted(set("".join(texts)))
    ids = {c: i for i, c in enumerate(vocabulary)}
    train, validation = [], []
    for text in texts:
        encoded = [ids[c] for c in text]
        held = _llround(len(encoded) * validation_fraction)
        train += encoded[: len(encoded) - held]
        validation += encoded[len(encoded) - held:]

    def windows(stream):
        count = (len(stream) - 1) // context
        stream = np.array(stream, dtype=np.int64)
        return stream[: count * context].reshape(count, context), stream[1: count * context + 1].reshape(count, context)
    return vocabulary, windows(train), windows(validation)


def text_categories(path, categories, separator="%", context=256, validation_fraction=0.1, balance=False):
    """A text-classification task as Kestrel's "task": "categories" reads it
    (engine/src/data/text_categories.cpp): each named file of the folder cut into documents at lines that
    hold only `separator` (blank documents dropped, final newlines trimmed), the first `context`
    characters of each padded on the left with id 0, ids from 1 in code-point order over the files' text,
    the label the file's index; balanced: the first as-many-as-the-smallest documents of each; each file's
    last round(count * validation_fraction) documents (at least one) held out. Returns ((x, y) train,
    (x, y) validation), int64 arrays."""
    texts = [(pathlib.Path(path) / name).read_bytes().decode("utf-8") for name in categories]
    ids = {c: i + 1 for i, c in enumerate(sorted(set("".join(texts))))}

    def documents(text):
        out, current = [], []
        lines = text.split("\n")
        for index, line in enumerate(lines):
            if line == separator:
                out.append("".join(current))
                current = []
            else:
                current.append(line + ("\n" if index + 1 < len(lines) else ""))
        out.append("".join(current))
        return [d.rstrip("\n") for d in out if d.rstrip("\n").strip(" \n\t")]
    per_category = [documents(t) for t in texts]
    kept = min(len(d) for d in per_category)
    splits = {"train": ([], []), "validation": ([], [])}
    for label, docs in enumerate(per_category):
        count = kept if balance else len(docs)
        held = max(1, _llround(count * validation_fraction))
        for i in range(count):
            encoded = [ids[c] for c in docs[i][:context]]
            x, y = splits["train" if i + held < count else "validation"]
            x.append([0] * (context - len(encoded)) + encoded)
            y.append(label)
    return tuple((np.array(x, dtype=np.int64), np.array(y, dtype=np.int64)) for x, y in splits.values())


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
