#!/usr/bin/env python3
"""bench/bench_mfu.cpp's workloads in PyTorch at its best: the 8192-wide MLP and GPT-2 small's shape
(written as nanoGPT writes it: fused QKV, scaled_dot_product_attention with is_causal, so flash
attention), trained with AMP (bf16 autocast; f16 with GradScaler) or in f32, under three
configurations: eager with Adam(fused=True), torch.compile of the whole step (forward, loss, backward,
optimizer) with mode="max-autotune-no-cudagraphs", and with mode="reduce-overhead" (CUDA graphs).
Prints one JSON object per line:

  {"workload": "gpt2_small/b8", "precision": "bf16", "mode": "eager", "ms_per_step": ..., "tflops": ..., "mfu": ...}

    python3 bench/pytorch/mfu.py [--only gpt2_small] [--precisions bf16 f16] [--modes eager compile-max-autotune]
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

PEAK_BF16_FLOPS = 989.4e12  # H100 SXM, dense, as bench_mfu.cpp


def mlp_flops(batch, width, layers):
    return 6 * batch * layers * width * width


def gpt_flops(batch, context, layers, width, vocab):  # as bench_mfu.cpp: PaLM's accounting
    return batch * context * (6 * (layers * 12 * width * width + width * vocab) + 12 * layers * context * width)


class Block(torch.nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv, self.proj = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
        self.up, self.down = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)

    def forward(self, x):  # x: (B, T, C)
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class GPT(torch.nn.Module):
    def __init__(self, vocab=50257, context=1024, layers=12, width=768, heads=12):
        super().__init__()
        self.tokens, self.positions = torch.nn.Embedding(vocab, width), torch.nn.Embedding(context, width)
        self.blocks = torch.nn.Sequential(*[Block(width, heads) for _ in range(layers)])
        self.ln, self.head = torch.nn.LayerNorm(width), torch.nn.Linear(width, vocab)

    def forward(self, ids):  # ids: (B, T) -> logits (B, T, vocab)
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.head(self.ln(self.blocks(self.tokens(ids) + self.positions(positions))))


def mlp(width=8192, layers=4):
    parts = []
    for i in range(layers):
        parts += [torch.nn.Linear(width, width)] + ([torch.nn.ReLU()] if i < layers - 1 else [])
    return torch.nn.Sequential(*parts)


WORKLOADS = {
    "mlp_8192": (mlp, 8192, mlp_flops(8192, 8192, 4)),
    "gpt2_small": (GPT, 8, gpt_flops(8, 1024, 12, 768, 50257)),
}


def batch(name, size, device):
    if name == "gpt2_small":
        return (torch.randint(0, 50257, (size, 1024), device=device),
                torch.randint(0, 50257, (size, 1024), device=device))
    return torch.randn(size, 8192, device=device), torch.randint(0, 8192, (size,), device=device)


def make_step(name, precision, mode, device):
    model = WORKLOADS[name][0]().to(device).train()
    x, y = batch(name, WORKLOADS[name][1], device)
    # Eager gets the fused (one-kernel) Adam; compiled steps let Inductor generate the update, as its
    # documentation recommends, with the step count on the device so CUDA graphs can replay it.
    compiled = mode != "eager"
    optimizer = (torch.optim.Adam(model.parameters(), lr=1e-4, capturable=True) if compiled
                 else torch.optim.Adam(model.parameters(), lr=1e-4, fused=True))
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "f16")

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            out = model(x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    if mode == "compile-max-autotune":
        return torch.compile(step, mode="max-autotune-no-cudagraphs")
    if mode == "compile-reduce-overhead":
        return torch.compile(step, mode="reduce-overhead")
    return step


def measure(step, warmup, steps, repetitions):
    for _ in range(warmup):  # compilation, autotuning, graph recording
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / steps)
    return statistics.median(times)


def run_one(name, precision, mode, steps, repetitions):
    row = {"workload": f"{name}/b{WORKLOADS[name][1]}", "precision": precision, "mode": mode, "torch": torch.__version__}
    started = time.perf_counter()
    seconds = measure(make_step(name, precision, mode, "cuda"), 3, steps, repetitions)
    flops = WORKLOADS[name][2]
    row.update(ms_per_step=seconds * 1e3, tflops=flops / seconds / 1e12, mfu=flops / seconds / PEAK_BF16_FLOPS,
               setup_seconds=round(time.perf_counter() - started - seconds * steps * repetitions, 1))
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=list(WORKLOADS))
    parser.add_argument("--precisions", nargs="*", default=["f32", "bf16", "f16"])
    parser.add_argument("--modes", nargs="*", default=["eager", "compile-max-autotune", "compile-reduce-overhead"])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=240, help="seconds for one configuration, compilation included")
    parser.add_argument("--single", action="store_true", help=argparse.SUPPRESS)  # one configuration, in a child
    args = parser.parse_args()
    torch.manual_seed(42)
    torch.backends.cuda.matmul.allow_tf32 = False  # f32 means f32, as Kestrel's default
    if args.single:
        print(json.dumps(run_one(args.only[0], args.precisions[0], args.modes[0], args.steps, args.repetitions)))
        return
    # Each configuration in a process of its own: a compilation that runs past the timeout, or a failure,
    # is reported in its row and costs the others nothing (memory, compiled caches).
    for name in args.only:
        for precision in args.precisions:
            for mode in args.modes:
                command = [sys.executable, __file__, "--single", "--only", name, "--precisions", precision,
                           "--modes", mode, "--steps", str(args.steps), "--repetitions", str(args.repetitions)]
                row = {"workload": f"{name}/b{WORKLOADS[name][1]}", "precision": precision, "mode": mode}
                try:
                    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
                    if done.returncode == 0:
                        row = json.loads(done.stdout.splitlines()[-1])
                    else:
                        lines = [l for l in done.stderr.splitlines() if l.strip()]
                        row["error"] = (lines[-1] if lines else f"exit status {done.returncode}")[:300]
                except subprocess.TimeoutExpired:
                    row["error"] = f"not done within {args.timeout:g} s (compilation included)"
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    sys.exit(main())
