#!/usr/bin/env python3
"""Model interchange: loads a Kestrel checkpoint (safetensors) into the equivalent torch.nn model and
evaluates it on the Fashion-MNIST test set; the accuracy must match Kestrel's within 0.1 point.

    python3 bench/pytorch/load_checkpoint.py runs/fashion_mlp            # a Kestrel run folder
    python3 bench/pytorch/load_checkpoint.py runs/fashion_mlp --device cuda
"""
import argparse
import json
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kestrel_models import KestrelModel, fashion_mnist_test, read_safetensors  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a Kestrel run folder (with checkpoint.json and summary.json)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    run = pathlib.Path(args.run)
    state = json.loads((run / "checkpoint.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    tensors, metadata = read_safetensors(run / state["weights"])
    model = KestrelModel(state["model"])
    model.load_kestrel_state(tensors)
    model.to(args.device).eval()
    images, labels = fashion_mnist_test()
    correct = 0
    with torch.no_grad():
        for begin in range(0, len(labels), 1000):
            x = torch.from_numpy(images[begin:begin + 1000]).to(args.device)
            correct += (model(x).argmax(1).cpu().numpy() == labels[begin:begin + 1000]).sum()
    accuracy = correct / len(labels)
    kestrel = summary["test_accuracy"]
    print(json.dumps({"model": metadata.get("model"), "pytorch_accuracy": accuracy, "kestrel_accuracy": kestrel,
                      "difference_points": abs(accuracy - kestrel) * 100}))
    return 0 if abs(accuracy - kestrel) * 100 <= 0.1 else 1


if __name__ == "__main__":
    sys.exit(main())
