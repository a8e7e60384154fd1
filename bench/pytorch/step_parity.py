#!/usr/bin/env python3
"""Step-by-step parity with PyTorch: Kestrel trains a model for a few Adam steps on one fixed batch (the
first 64 Fashion-MNIST training images, normalised as in the shipped configs) and checkpoints after each;
PyTorch loads the weights and Adam moments of step k, takes step k+1 on the same batch and must land on
Kestrel's step-k+1 weights. This pins forward, loss, backward and the optimizer to torch's arithmetic
(dropout layers are left out: the two frameworks draw different masks by design).

    python3 bench/pytorch/step_parity.py [--model models/fashion_mlp.json] [--backend cpu] [--build build]
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
from kestrel_models import KestrelModel, read_idx, read_safetensors  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
FOLDER = "/usr/share/datasets/fashion-mnist"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="models/fashion_mlp.json")
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--build", default="build")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--tolerance", type=float, default=1e-3, help="worst difference / Adam step size")
    args = parser.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="kestrel_step_parity_"))
    spec = json.loads((ROOT / args.model).read_text())
    if "layers" in spec:
        spec["layers"] = [layer for layer in spec["layers"] if layer["type"] != "dropout"]
    elif any(node["type"] == "dropout" for node in spec["nodes"]):
        sys.exit("step_parity: drop the dropout nodes of a node-graph model by hand (their inputs must be rewired)")
    (work / "model.json").write_text(json.dumps(spec))
    (work / "run.json").write_text(json.dumps({
        "model": "model.json", "out": "run",
        "data": {"dataset": "fashion-mnist", "mean": [0.2860], "std": [0.3530], "train_subset": 64, "test_subset": 64},
        "optimizer": {"type": "adam", "lr": 1e-3}, "batch_size": 64, "epochs": args.steps,
        "checkpoint": {"every_steps": 1, "keep": args.steps + 1}}))
    subprocess.run([str(ROOT / args.build / "bin" / "kestrel"), "train", str(work / "run.json"), "--backend", args.backend,
                    "--quiet"], check=True)

    images = read_idx(f"{FOLDER}/train-images-idx3-ubyte.gz")[:64].astype(np.float32) / 255.0
    x = torch.from_numpy((images - 0.2860) / 0.3530)
    y = torch.from_numpy(read_idx(f"{FOLDER}/train-labels-idx1-ubyte.gz")[:64])
    checkpoint = lambda step: read_safetensors(work / "run" / "checkpoints" / f"step-{step:09d}.safetensors")[0]
    worst_ratio = 0.0
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
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        for (name, p) in model.named_parameters():
            key = name[len("layers."):]
            difference = float(np.abs(p.detach().numpy() - after[key]).max())
            moved = float(np.abs(after[key] - before[key]).max())
            worst_ratio = max(worst_ratio, difference / moved)
            print(json.dumps({"step": step + 1, "parameter": key, "max_abs_difference": difference, "max_step": moved}))
    print(json.dumps({"model": args.model, "backend": args.backend, "steps_compared": args.steps - 1,
                      "worst_difference_over_step": worst_ratio, "torch": torch.__version__,
                      "pass": worst_ratio <= args.tolerance}))
    sys.exit(0 if worst_ratio <= args.tolerance else 1)


if __name__ == "__main__":
    main()
