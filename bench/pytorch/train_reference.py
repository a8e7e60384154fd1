#!/usr/bin/env python3
"""PyTorch reference for the accuracy targets: trains the PyTorch twin of a Kestrel model file with the
seeds' recipe (Fashion-MNIST normalised like Kestrel's configs, batch 64, shuffled each epoch, Adam,
cross-entropy, 10 epochs) for several seeds and prints the final test accuracy of each, so Kestrel's
figures can be read against what PyTorch itself reaches with the same recipe.

    python3 bench/pytorch/train_reference.py models/fashion_mlp.json --seeds 42 43 7 [--device cpu]
                                             [--schedule constant|cosine]

--schedule cosine decays the learning rate every step from --lr to 0 over the whole run, with the formula
of Kestrel's "cosine" schedule (no warm-up, min_lr 0): lr * (1 + cos(pi * step / total_steps)) / 2.
"""
import argparse
import json
import math
import pathlib
import statistics
import sys
import time

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kestrel_models import KestrelModel, read_idx  # noqa: E402

FOLDER = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530


def load(split):
    images = read_idx(f"{FOLDER}/{split}-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    labels = read_idx(f"{FOLDER}/{split}-labels-idx1-ubyte.gz")
    return torch.from_numpy((images - MEAN) / STD), torch.from_numpy(labels)


def accuracy(model, images, labels, device):
    model.eval()
    correct = 0
    with torch.no_grad():
        for begin in range(0, len(labels), 1000):
            out = model(images[begin:begin + 1000].to(device))
            correct += (out.argmax(1).cpu() == labels[begin:begin + 1000]).sum().item()
    return correct / len(labels)


def cosine(step, total_steps):
    """Kestrel's cosine schedule as a factor of the base learning rate (engine/src/optim/optimizer.cpp)."""
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, step / max(1, total_steps))))


def train(model_file, seed, epochs, batch, lr, device, schedule="constant"):
    torch.manual_seed(seed)
    train_x, train_y = load("train")
    test_x, test_y = load("t10k")
    model = KestrelModel(model_file).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(seed)
    total_steps = epochs * math.ceil(len(train_y) / batch)
    factor = cosine if schedule == "cosine" else (lambda step, total: 1.0)
    step = 0
    per_epoch = []
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(train_y), generator=generator)
        for begin in range(0, len(order), batch):  # drop_last=False, like torch's DataLoader default
            index = order[begin:begin + batch]
            for group in optimizer.param_groups:
                group["lr"] = lr * factor(step, total_steps)
            step += 1
            optimizer.zero_grad()
            loss = loss_fn(model(train_x[index].to(device)), train_y[index].to(device))
            loss.backward()
            optimizer.step()
        per_epoch.append(accuracy(model, test_x, test_y, device))
    return per_epoch


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a Kestrel model file, e.g. models/fashion_mlp.json")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--schedule", choices=["constant", "cosine"], default="constant")
    args = parser.parse_args()
    finals = []
    for seed in args.seeds:
        started = time.time()
        per_epoch = train(args.model, seed, args.epochs, args.batch_size, args.lr, args.device, args.schedule)
        finals.append(per_epoch[-1])
        print(json.dumps({"model": args.model, "seed": seed, "test_accuracy": per_epoch[-1],
                          "per_epoch": [round(a, 4) for a in per_epoch], "seconds": round(time.time() - started),
                          "torch": torch.__version__, "device": args.device,
                          "schedule": args.schedule}), flush=True)
    if len(finals) > 1:
        print(json.dumps({"model": args.model, "seeds": args.seeds, "mean": statistics.mean(finals),
                          "min": min(finals), "max": max(finals)}))


if __name__ == "__main__":
    main()
