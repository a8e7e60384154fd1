#!/usr/bin/env python3
"""How much a CPU training step costs beyond its matrix products: the seeds' MLP 1024-2048-512-10 at
batch 128 with Adam, one full step on the CPU plugin versus the same step's eight sgemm calls made
directly in OpenBLAS, side by side in one run of build/bin/bench_train. Target: step <= 1.3x GEMMs.
Writes bench/results/<date>-<host>-cpu-step-overhead.md.

    python3 bench/cpu_step_overhead.py [--build build] [--repetitions 7]
"""
import argparse

from benchlib import result_path, run_medians, write


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--repetitions", type=int, default=7)
    args = parser.parse_args()
    medians, context, shown = run_medians(args.build, "bench_train", "seeds_mlp/(gemms-only|cpu:0)", args.repetitions)
    gemms = medians["train_step/seeds_mlp/gemms-only-openblas/b128/real_time"]
    step = medians["train_step/seeds_mlp/cpu:0/b128/real_time"]
    ratio = step / gemms
    path, date = result_path("cpu-step-overhead")
    write(path, [
        "# CPU training step versus its GEMMs alone",
        "",
        f"Date: {date}. Machine: {context.get('num_cpus')} CPUs. Median of {args.repetitions} repetitions, one run.",
        f"Command: `python3 bench/cpu_step_overhead.py`, which ran `{shown}`.",
        "",
        "Workload: the seeds' MLP 1024-2048-512-10, batch 128, Adam, f32. The step is zero_grad, forward (fused",
        "linear+relu), softmax-cross-entropy, backward, the fused Adam update over the flat parameters, and a",
        "synchronise; the floor is the same eight sgemm calls (3 forward, 2 input-gradient, 3 weight-gradient)",
        "made directly in the same OpenBLAS library.",
        "",
        "| Kestrel cpu:0 step (ms) | sgemm calls alone (ms) | ratio | target |",
        "| --- | --- | --- | --- |",
        f"| {step:.2f} | {gemms:.2f} | {ratio:.3f} | <= 1.3 ({'met' if ratio <= 1.3 else 'NOT met'}) |",
    ])


if __name__ == "__main__":
    main()
