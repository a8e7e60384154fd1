#!/usr/bin/env python3
"""The training-step workloads of bench/bench_train.cpp in PyTorch at its best, for side-by-side
figures: the same models (built from the same JSON files), batch sizes and Adam, in f32 (TF32 and bf16
autocast optional), under each configuration a PyTorch user would reach for: eager with
Adam(fused=True) ("eager"), and with --compile torch.compile of the whole step (zero_grad, forward,
loss, backward, optimizer step) with mode="max-autotune-no-cudagraphs" ("compile-max-autotune") and,
on a GPU, mode="reduce-overhead" (CUDA graphs, "compile-reduce-overhead"); on a CPU the default mode
("compile"). Prints one JSON object per
line (a configuration that fails is printed with its error, never left out silently):

  {"workload": "seeds_mlp/b128", "backend": "pytorch-eager:cuda", "ms_per_step": ..., "samples_per_second": ...}

    python3 bench/pytorch/workloads.py --device cuda [--tf32] [--bf16] [--compile] [--steps 50]
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

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKLOADS = [("seeds_mlp", "models/seeds_mlp.json", 128), ("fashion_mlp", "models/fashion_mlp.json", 64),
             ("fashion_mlp", "models/fashion_mlp.json", 512), ("fashion_convnet", "models/convnet.json", 64),
             ("fashion_convnet", "models/convnet.json", 512), ("lstm_generator", "models/lstm_generator.json", 32),
             ("gpt_char", "models/gpt_char.json", 32), ("gru_generator", "bench/models/gru_generator.json", 32),
             ("transformer_classifier", "models/transformer_classifier.json", 32)]


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
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (mixed precision)")
    parser.add_argument("--compile", action="store_true", help="also measure whole-step torch.compile")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--only", default="")
    parser.add_argument("--modes", nargs="*", default=None,
                        help="only these of eager and the compiled modes (a GPU lease's minutes: max-autotune "
                             "takes minutes to tune a ConvNet at batch 512)")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.manual_seed(42)
    compiled = {"compile-max-autotune": "max-autotune-no-cudagraphs", "compile-reduce-overhead": "reduce-overhead"}
    if not args.device.startswith("cuda"):  # CUDA graphs are GPU-only, and GEMM autotuning takes minutes on a CPU
        compiled = {"compile": "default"}
    modes = ["eager"] + (list(compiled) if args.compile else [])
    modes = [m for m in modes if args.modes is None or m in args.modes]
    precision = "bf16" if args.bf16 else "tf32" if args.tf32 else "f32"
    for name, model_file, batch in WORKLOADS:
        if args.only and args.only not in f"{name}/b{batch}":  # a workload, or one batch of it
            continue
        for mode in modes:
            model = KestrelModel(ROOT / model_file).to(args.device).train()
            # Eager gets the one-kernel fused Adam (CPU too since torch 2.4); a compiled step lets Inductor
            # generate the update, with its step count on the device so that CUDA graphs can replay it.
            optimizer = (torch.optim.Adam(model.parameters(), lr=1e-3, fused=True) if mode == "eager"
                         else torch.optim.Adam(model.parameters(), lr=1e-3, capturable=mode.endswith("overhead")))
            if model.tokens:  # character ids, a label per position (as bench_train.cpp)
                x = torch.randint(0, 113, [batch] + list(model.input_shape), device=args.device)
                y = torch.randint(0, 113, [batch] + list(model.input_shape), device=args.device)
                with torch.no_grad():
                    classes = model(x[:1]).shape
                if len(classes) == 2:  # a class per document, left-padded with id 0 as bench/synthetic_batch.h does
                    length = x.shape[1]
                    for n in range(batch):
                        x[n, :(97 * n) % length] = 0
                    y = torch.arange(batch, device=args.device) % classes[1]
            else:
                x = torch.randn([batch] + list(model.input_shape), device=args.device)
                y = torch.randint(0, 10, (batch,), device=args.device)
            loss_fn = torch.nn.CrossEntropyLoss()

            def step():
                optimizer.zero_grad(set_to_none=True)
                with torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16, enabled=args.bf16):
                    out = model(x)
                    loss = loss_fn(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))
                loss.backward()
                optimizer.step()

            row = {"workload": f"{name}/b{batch}", "backend": f"pytorch-{mode}:{args.device}", "precision": precision}
            try:
                seconds = measure(torch.compile(step, mode=compiled[mode]) if mode in compiled else step,
                                  args.device, args.steps)
                row.update(ms_per_step=seconds * 1e3, samples_per_second=batch / seconds)
            except Exception as error:  # reported, so the report can say which configuration failed
                row["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
            print(json.dumps(row), flush=True)
            torch._dynamo.reset()


if __name__ == "__main__":
    main()
