#!/usr/bin/env python3
"""How much a CPU training step costs beyond its matrix products: the seeds' MLP 1024-2048-512-10 at
batch 128 with Adam, one full step on the CPU plugin versus the same step's eight sgemm calls made
directly in OpenBLAS. Shared virtual machines drift by tens of percent within a minute, so the two are
measured back to back in rounds (one bench_train run each) and the reported ratio is the median of the
per-round ratios. Target: step <= 1.3x GEMMs. With --pytorch PYTHON, each round also times PyTorch's CPU
step of the same model and batch (bench/pytorch/workloads.py, with that interpreter), read against the
same OpenBLAS floor. Writes bench/results/<date>-<host>-cpu-step-overhead.md.

    python3 bench/cpu_step_overhead.py [--build build] [--rounds 11] [--pytorch /path/to/python-with-torch]
"""
import argparse
import json
import statistics
import subprocess

from benchlib import ROOT, result_path, run_medians, write


def pytorch_step(python):
    """PyTorch's eager CPU step of the seeds' MLP at batch 128 (ms), and the torch version."""
    command = [python, "bench/pytorch/workloads.py", "--device", "cpu", "--only", "seeds_mlp", "--steps", "20"]
    lines = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True).stdout.splitlines()
    row = next(json.loads(line) for line in lines if '"seeds_mlp/b128"' in line)
    version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], check=True,
                             capture_output=True, text=True).stdout.strip()
    return row["ms_per_step"], version


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--pytorch", default="", help="a Python interpreter with torch, for PyTorch's step")
    args = parser.parse_args()
    steps, eager_steps, floors, torch_steps, torch_version = [], [], [], [], ""
    for _ in range(args.rounds):
        medians, context, shown = run_medians(args.build, "bench_train", "seeds_mlp/(gemms-only|cpu:0)", 3)
        floors.append(medians["train_step/seeds_mlp/gemms-only-openblas/b128/real_time"])
        steps.append(medians["train_step/seeds_mlp/cpu:0/b128/real_time"])
        eager_steps.append(medians["train_step_eager/seeds_mlp/cpu:0/b128/real_time"])
        if args.pytorch:
            ms, torch_version = pytorch_step(args.pytorch)
            torch_steps.append(ms)
    ratios = sorted(s / g for s, g in zip(steps, floors))
    eager_ratios = sorted(s / g for s, g in zip(eager_steps, floors))
    ratio, step, gemms = statistics.median(ratios), statistics.median(steps), statistics.median(floors)
    eager_ratio, eager_step = statistics.median(eager_ratios), statistics.median(eager_steps)
    torch_ratios = sorted(s / g for s, g in zip(torch_steps, floors))
    torch_rows = [
        f"| PyTorch {torch_version} (eager, CPU; its own GEMM library) | {statistics.median(torch_steps):.2f} | "
        f"{gemms:.2f} | {statistics.median(torch_ratios):.3f} | |"] if torch_steps else []
    torch_notes = ["", f"Per-round ratios (PyTorch), sorted: {', '.join(f'{r:.3f}' for r in torch_ratios)}.",
                   "PyTorch's step: `python3 bench/pytorch/workloads.py --device cpu "
                   "--only seeds_mlp --steps 20` in each round (Adam, zero_grad(set_to_none=True))."] if torch_steps else []
    shown_command = "python3 bench/cpu_step_overhead.py" + (f" --rounds {args.rounds}" if args.rounds != 11 else "") + \
        (" --pytorch PYTHON" if args.pytorch else "")
    path, date = result_path("cpu-step-overhead")
    write(path, [
        "# CPU training step versus its GEMMs alone",
        "",
        f"Date: {date}. Machine: {context.get('num_cpus')} CPUs. {args.rounds} rounds; each ran `{shown}`",
        f"(median of 3 repetitions of both benchmarks, interleaved). Command: `{shown_command}`.",
        "",
        "Workload: the seeds' MLP 1024-2048-512-10, batch 128, Adam, f32. The step is forward (fused",
        "linear+relu), softmax-cross-entropy, backward (overwriting last step's gradients: no zeroing pass), the",
        "fused Adam update over the flat parameters and a synchronise — as the trainer runs it: forward and",
        "backward replayed from a capture (`train_step`), and, for comparison, launched op by op",
        "(`train_step_eager`). The floor is the same eight sgemm calls (3 forward, 2 input-gradient, 3",
        "weight-gradient, each weight gradient into its own buffer with beta = 0, as the engine issues them)",
        "made directly in the same OpenBLAS library.",
        "",
        "| step | step time (ms, median) | sgemm calls alone (ms, median) | ratio (median of rounds) | target |",
        "| --- | --- | --- | --- | --- |",
        f"| Kestrel cpu:0, as the trainer runs it (captured) | {step:.2f} | {gemms:.2f} | {ratio:.3f} | <= 1.3 ({'met' if ratio <= 1.3 else 'NOT met'}) |",
        f"| Kestrel cpu:0, every op launched (eager) | {eager_step:.2f} | {gemms:.2f} | {eager_ratio:.3f} | |",
        *torch_rows,
        "",
        f"Per-round ratios (captured), sorted: {', '.join(f'{r:.3f}' for r in ratios)}.",
        f"Per-round ratios (eager), sorted: {', '.join(f'{r:.3f}' for r in eager_ratios)}.",
        *torch_notes,
    ])


if __name__ == "__main__":
    main()
