#!/usr/bin/env python3
"""Measures what the engine and plugin ABI add to a matrix product on the CPU backend.

Runs build/bin/bench_ops once, with sgemm through the CPU plugin and sgemm straight into the same
OpenBLAS library side by side, and writes bench/results/<date>-<host>-cpu-abi-overhead.md with the
median times and their ratio (OpenBLAS time / plugin time: 1.0 means no cost, target >= 0.9).

    python3 bench/abi_overhead.py [--build build] [--repetitions 7]
"""
import argparse
import datetime
import json
import pathlib
import platform
import subprocess


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--repetitions", type=int, default=7)
    args = parser.parse_args()
    root = pathlib.Path(__file__).resolve().parent.parent
    binary = root / args.build / "bin" / "bench_ops"
    command = [str(binary), "--benchmark_filter=^gemm/(openblas-direct|cpu:0)/f32",
               f"--benchmark_repetitions={args.repetitions}", "--benchmark_report_aggregates_only=true",
               "--benchmark_format=json"]
    report = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    medians = {}
    for row in report["benchmarks"]:
        if row.get("aggregate_name") == "median":
            medians[row["run_name"]] = row["real_time"]
    lines = []
    worst = None
    for n in (256, 1024):
        direct = medians[f"gemm/openblas-direct/f32/{n}/real_time"]
        plugin = medians[f"gemm/cpu:0/f32/{n}/real_time"]
        ratio = direct / plugin
        worst = ratio if worst is None else min(worst, ratio)
        lines.append(f"| {n}x{n}x{n} | {plugin:.1f} | {direct:.1f} | {ratio:.3f} |")
    context = report["context"]
    date = datetime.date.today().isoformat()
    host = platform.node() or "host"
    out = root / "bench" / "results" / f"{date}-{host}-cpu-abi-overhead.md"
    out.write_text("\n".join([
        "# CPU plugin sgemm versus OpenBLAS called directly",
        "",
        f"Date: {date}. Machine: {context.get('num_cpus')} CPUs at {context.get('mhz_per_cpu')} MHz "
        f"({platform.processor() or platform.machine()}). Median of {args.repetitions} repetitions, one run.",
        "",
        "Command: `python3 bench/abi_overhead.py` which ran:",
        "",
        f"    {' '.join(command[0:1]).replace(str(root) + '/', '')} {' '.join(command[1:])}",
        "",
        "Both sides call the same library (libblas.so.3 from OpenBLAS 0.3.21); the plugin side goes through",
        "kestrel::ops::gemm_, the plugin ABI (supports_op + launch), KokkosBlas::gemm and a stream synchronise.",
        "",
        "| shape (m x k x n) | Kestrel cpu plugin (us) | OpenBLAS direct (us) | ratio (direct / plugin) |",
        "| --- | --- | --- | --- |",
        *lines,
        "",
        f"Target: ratio >= 0.9 at both sizes. Worst ratio: {worst:.3f} -> {'met' if worst >= 0.9 else 'NOT met'}.",
        "",
    ]))
    print(out.read_text())


if __name__ == "__main__":
    main()
