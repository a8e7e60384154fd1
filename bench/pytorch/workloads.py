#!/usr/bin/env python3
"""The training-step workloads of bench/bench_train.cpp in PyTorch, for side-by-side figures: the same
models (built from the same JSON files), batch sizes, f32 precision (TF32 optional) and Adam, eager and
torch.compile. Prints one JSON object per line:

  {"workload": "seeds_mlp/b128", "backend": "pytorch-eager:cuda", "ms_per_step": ..., "samples_per_second": ...}

    python3 bench/pytorch/workloads.py --device cuda [--tf32] [--compile] [--steps 50]
"""
import argparse
import json
import pathlib
import statistics
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kestrel_models import KestrelModel  # noqa: E402

MODELS = pathlib.Path(__file__).resolve().parents[2] / "models"
WORKLOADS = [("seeds_mlp", "seeds_mlp.json", 128), ("fashion_mlp", "fashion_mlp.json", 64),
             ("fashion_mlp", "fashion_mlp.json", 512), ("fashion_convnet", "convnet.json", 64),
             ("fashion_convnet", "convnet.json", 512), ("lstm_generator", "lstm_generator.json", 32),
             ("gpt_char", "gpt_char.json", 32)]


def measure(step, device, steps, repetitions=5):
    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    for _ in range(10):  # warm-up (and compilation)
        step()
    sync()
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        times.append((time.perf_counter() - start) / steps)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tf32", action="store_true")
    parser.add_argument("--compile", action="store_true", help="also measure torch.compile")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.manual_seed(42)
    modes = ["eager"] + (["compile"] if args.compile else [])
    for name, model_file, batch in WORKLOADS:
        if args.only and args.only not in name:
            continue
        for mode in modes:
            model = KestrelModel(MODELS / model_file).to(args.device).train()
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            if model.tokens:  # character ids, a label per position (as bench_train.cpp)
                x = torch.randint(0, 113, [batch] + list(model.input_shape), device=args.device)
                y = torch.randint(0, 113, [batch] + list(model.input_shape), device=args.device)
            else:
                x = torch.randn([batch] + list(model.input_shape), device=args.device)
                y = torch.randint(0, 10, (batch,), device=args.device)
            loss_fn = torch.nn.CrossEntropyLoss()
            forward = torch.compile(model) if mode == "compile" else model

            def step():
                optimizer.zero_grad(set_to_none=True)
                out = forward(x)
                loss_fn(out.reshape(-1, out.shape[-1]), y.reshape(-1)).backward()
                optimizer.step()

            seconds = measure(step, args.device, args.steps)
            precision = "tf32" if args.tf32 else "f32"
            print(json.dumps({"workload": f"{name}/b{batch}", "backend": f"pytorch-{mode}:{args.device}",
                              "precision": precision, "ms_per_step": seconds * 1e3,
                              "samples_per_second": batch / seconds}), flush=True)


if __name__ == "__main__":
    main()
