#!/usr/bin/env python3
"""Step-by-step parity with PyTorch: Kestrel trains a model for a few Adam steps on one fixed batch (the
first 64 Fashion-MNIST training images, normalised as in the shipped configs, or for a model of token
ids the first 64 windows of Debian's fortunes corpus) and checkpoints after each;
PyTorch loads the weights and Adam moments of step k and takes step k+1 on the same batch: its gradients
must match Kestrel's (recovered from Kestrel's Adam moments) to 1e-4 of their largest magnitude, and the
weights it lands on are compared with Kestrel's step-k+1 weights. This pins forward, loss, backward and
the optimizer to torch's arithmetic.
Kestrel's random streams are replayed in PyTorch (bench/pytorch/kestrel_random.py): the batch comes in
the order of that epoch's shuffle and each dropout layer multiplies by Kestrel's keep-mask.

    python3 bench/pytorch/step_parity.py [--model models/fashion_mlp.json] [--backend cpu] [--build build]

Dropout inside recurrent and Transformer layers (between LSTM layers, on attention weights, after
attention and feed-forward) is set to 0 for the comparison: only `dropout` layers' masks are replayed.
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kestrel_models import KestrelModel, read_idx, read_safetensors, text_categories, text_windows  # noqa: E402
from kestrel_random import DROPOUT_KEY_XOR, bernoulli, epoch_permutation  # noqa: E402

SEED = 42


class KestrelDropout(torch.nn.Module):
    """Dropout with the keep-mask Kestrel drew (scaled by 1 / (1 - p) like nn.Dropout)."""

    def __init__(self, mask, p):
        super().__init__()
        self.mask, self.p = mask, p

    def forward(self, x):
        return x * self.mask / (1.0 - self.p)


def use_kestrel_masks(model, spec, step_offset, batch):
    """Swaps each dropout layer for Kestrel's mask of this step: the layers draw in order, each taking
    ceil(numel / 4) Philox blocks from the step's counter offset (engine/src/model/layers.cpp)."""
    offset = step_offset
    for index, name in enumerate(model.order):
        module = model.layers[name]
        if isinstance(module, torch.nn.Dropout):
            shape = [batch] + list(model.shapes[name][1:])
            count = int(np.prod(shape))
            keep = bernoulli(SEED ^ DROPOUT_KEY_XOR, offset, count, 1.0 - module.p)
            model.layers[name] = KestrelDropout(torch.from_numpy(keep.reshape(shape)), module.p)
            offset += (count + 3) // 4
    return offset - step_offset

ROOT = pathlib.Path(__file__).resolve().parents[2]
FOLDER = "/usr/share/datasets/fashion-mnist"
CORPUS = "/usr/share/games/fortunes"


def without_inner_dropout(spec):
    """The model with the dropout of every layer but `dropout` layers at 0; True when one changed."""
    changed = False
    for item in spec.get("layers") or spec["nodes"]:
        if item["type"] != "dropout" and item.get("dropout", 0) != 0:
            item["dropout"] = 0.0
            changed = True
        if item["type"] in ("transformer_encoder_layer", "transformer_decoder_layer", "transformer") and "dropout" not in item:
            item["dropout"] = 0.0  # torch's and Kestrel's default is 0.1
            changed = True
    return changed


# A sequence classifier (an (N, C) output) trains on these fortune categories, as transformer_classifier's
# and rnn_classifier's run configs do; a model of token ids with a label per position on the corpus's windows.
CATEGORIES = ["computers", "definitions", "people", "science"]


def data_config(tokens, classifier):
    """The data section of Kestrel's run config: the first 64 samples of the model's kind of data."""
    subsets = {"train_subset": 64, "test_subset": 64}
    if classifier:
        return {"dataset": "text", "task": "categories", "path": CORPUS, "categories": CATEGORIES, "separator": "%",
                "balance": True, "validation_fraction": 0.1, **subsets}
    if tokens:
        return {"dataset": "text", "path": CORPUS, "exclude": ["*.dat"], **subsets}
    return {"dataset": "fashion-mnist", "mean": [0.2860], "std": [0.3530], **subsets}


def batch_of(spec, tokens, classifier):
    """The first 64 samples as Kestrel's run config below loads them, and how the loss reads them."""
    if classifier:
        (x, y), _ = text_categories(CORPUS, CATEGORIES, "%", spec["input"]["shape"][0], 0.1, balance=True)
        return torch.from_numpy(x[:64].copy()), torch.from_numpy(y[:64].copy())
    if not tokens:
        images = read_idx(f"{FOLDER}/train-images-idx3-ubyte.gz")[:64].astype(np.float32) / 255.0
        return torch.from_numpy((images - 0.2860) / 0.3530), torch.from_numpy(read_idx(f"{FOLDER}/train-labels-idx1-ubyte.gz")[:64])
    _, (x, y), _ = text_windows(CORPUS, ["*.dat"], spec["input"]["shape"][0], 0.1)
    return torch.from_numpy(x[:64].copy()), torch.from_numpy(y[:64].copy())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="models/fashion_mlp.json")
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--build", default="build")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="worst |torch gradient - Kestrel gradient| / max |gradient|, per parameter")
    args = parser.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="kestrel_step_parity_"))
    spec = json.loads((ROOT / args.model).read_text())
    inner_dropout_off = without_inner_dropout(spec)
    tokens = spec["input"].get("dtype") == "i64"
    (work / "model.json").write_text(json.dumps(spec))
    with torch.no_grad():  # a class per sequence, or a label per position?
        probe = KestrelModel(work / "model.json").eval()(torch.zeros([1] + spec["input"]["shape"], dtype=torch.int64))
    classifier = tokens and probe.dim() == 2
    data = data_config(tokens, classifier)
    (work / "run.json").write_text(json.dumps({
        "model": "model.json", "out": "run",
        "data": data,
        "optimizer": {"type": "adam", "lr": 1e-3}, "batch_size": 64, "epochs": args.steps, "seed": SEED,
        "checkpoint": {"every_steps": 1, "keep": args.steps + 1}}))
    subprocess.run([str(ROOT / args.build / "bin" / "kestrel"), "train", str(work / "run.json"), "--backend", args.backend,
                    "--quiet"], check=True)

    x, y = batch_of(spec, tokens, classifier)
    checkpoint = lambda step: read_safetensors(work / "run" / "checkpoints" / f"step-{step:09d}.safetensors")[0]
    worst_ratio = 0.0
    draws_per_step = None
    for step in range(1, args.steps):
        before, after = checkpoint(step), checkpoint(step + 1)
        model = KestrelModel(work / "model.json")
        model.load_kestrel_state({k: v.copy() for k, v in before.items()})
        params = list(model.parameters())
        optimizer = torch.optim.Adam(params, lr=1e-3)
        offset = 0
        for p in params:  # Kestrel's moments are flat, in parameter order
            n = p.numel()
            optimizer.state[p] = {"step": torch.tensor(float(step)),
                                  "exp_avg": torch.from_numpy(before["optimizer.exp_avg"][offset:offset + n].reshape(p.shape).copy()),
                                  "exp_avg_sq": torch.from_numpy(before["optimizer.exp_avg_sq"][offset:offset + n].reshape(p.shape).copy())}
            offset += n
        # One batch per epoch here: step k+1 runs in epoch k, after k steps' worth of dropout draws.
        order = torch.tensor(epoch_permutation(64, SEED, step))
        if draws_per_step is None:
            draws_per_step = use_kestrel_masks(KestrelModel(work / "model.json"), spec, 0, 64)
        use_kestrel_masks(model, spec, step * draws_per_step, 64)
        model.train()
        optimizer.zero_grad()
        logits = model(x[order])  # (N, classes), or (N, T, classes) with a label per position
        torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[order].reshape(-1)).backward()
        optimizer.step()
        offset = 0
        for (name, p) in model.named_parameters():
            key = name[len("layers."):]
            # Kestrel's gradient of this step, recovered from its first moment: m' = b1 m + (1 - b1) g.
            n = p.numel()
            moments = [state["optimizer.exp_avg"][offset:offset + n].reshape(p.shape) for state in (before, after)]
            offset += n
            kestrel_grad = (moments[1] - 0.9 * moments[0]) / 0.1
            gradient = float(np.abs(p.grad.numpy() - kestrel_grad).max() / np.abs(p.grad.numpy()).max())
            difference = float(np.abs(p.detach().numpy() - after[key]).max())
            moved = float(np.abs(after[key] - before[key]).max())
            worst_ratio = max(worst_ratio, gradient)
            print(json.dumps({"step": step + 1, "parameter": key, "gradient_difference_over_max": gradient,
                              "weight_difference": difference, "max_step": moved}))
    print(json.dumps({"model": args.model, "backend": args.backend, "steps_compared": args.steps - 1,
                      "inner_dropout_set_to_0": inner_dropout_off,
                      "worst_gradient_difference": worst_ratio, "torch": torch.__version__,
                      "pass": worst_ratio <= args.tolerance}))
    sys.exit(0 if worst_ratio <= args.tolerance else 1)


if __name__ == "__main__":
    main()
