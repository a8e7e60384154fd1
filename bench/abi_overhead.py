#!/usr/bin/env python3
"""Measures what the engine and plugin ABI add to a matrix product on the CPU backend.

Runs build/bin/bench_ops once, with sgemm through the CPU plugin and sgemm straight into the same
OpenBLAS library side by side, and writes bench/results/<date>-<host>-cpu-abi-overhead.md with the
median times and their ratio (OpenBLAS time / plugin time: 1.0 means no cost, target >= 0.9).

    python3 bench/abi_overhead.py [--build build] [--repetitions 7]
"""
import argparse
import platform

from benchlib import result_path, run_medians, write


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--repetitions", type=int, default=7)
    args = parser.parse_args()
    medians, context, shown = run_medians(args.build, "bench_ops", "^gemm/(openblas-direct|cpu:0)/f32", args.repetitions)
    lines, worst = [], None
    for n in (256, 1024):
        direct = medians[f"gemm/openblas-direct/f32/{n}/real_time"]
        plugin = medians[f"gemm/cpu:0/f32/{n}/real_time"]
        ratio = direct / plugin
        worst = ratio if worst is None else min(worst, ratio)
        lines.append(f"| {n}x{n}x{n} | {plugin:.1f} | {direct:.1f} | {ratio:.3f} |")
    path, date = result_path("cpu-abi-overhead")
    write(path, [
        "# CPU plugin sgemm versus OpenBLAS called directly",
        "",
        f"Date: {date}. Machine: {context.get('num_cpus')} CPUs at {context.get('mhz_per_cpu')} MHz "
        f"({platform.processor() or platform.machine()}). Median of {args.repetitions} repetitions, one run.",
        "",
        f"Command: `python3 bench/abi_overhead.py`, which ran `{shown}`.",
        "",
        "Both sides call the same library (libblas.so.3 from OpenBLAS 0.3.21); the plugin side goes through",
        "kestrel::ops::gemm_, the plugin ABI (supports_op + launch), the BLAS call and a stream synchronise.",
        "",
        "| shape (m x k x n) | Kestrel cpu plugin (us) | OpenBLAS direct (us) | ratio (direct / plugin) |",
        "| --- | --- | --- | --- |",
        *lines,
        "",
        f"Target: ratio >= 0.9 at both sizes. Worst ratio: {worst:.3f} -> {'met' if worst >= 0.9 else 'NOT met'}.",
    ])


if __name__ == "__main__":
    main()
