#!/usr/bin/env python3
"""Model-FLOPs utilisation side by side on one GPU: Kestrel's training step (build/bin/bench_mfu) and
PyTorch's best configurations (bench/pytorch/mfu.py: AMP eager with fused Adam, whole-step torch.compile
with max-autotune and with CUDA graphs) on the 8192-wide MLP and GPT-2 small's shape, in one run.
Writes bench/results/<date>-<host>-mfu.md: step time, TFLOP/s, MFU against the dense bf16 peak, the best
PyTorch configuration per workload and precision and Kestrel's speed relative to it, and what f16's loss
scaling costs Kestrel's f16 step.

    python3 bench/mfu.py [--precisions bf16 f16] [--torch-modes eager compile-max-autotune] [--torch-f16-modes eager]
                         [--torch-timeout 240] [--only gpt2_small]
"""
import argparse
import json
import subprocess
import sys

from benchlib import ROOT, result_path, write


def kestrel_rows(build, only, precisions):
    pattern = "(" + "|".join(only) + ")"
    command = [str(ROOT / build / "bin" / "bench_mfu"), "--benchmark_format=json",
               f"--benchmark_filter=(mfu/{pattern}/.*/({'|'.join(precisions)})/)|loss_scaling/{pattern}"]
    # A benchmark that fails (out of memory) is reported with its message, and the others still run.
    report = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    rows, scaling, failures = [], {}, []
    for b in report["benchmarks"]:
        parts = b["run_name"].split("/")
        if parts[0] == "loss_scaling":
            scaling[parts[1]] = b["real_time"]
            continue
        if "error_occurred" in b:
            failures.append(f"{b['run_name']}: {b.get('error_message', '')}")
            continue
        rows.append({"workload": f"{parts[1]}/{parts[4]}", "precision": parts[3], "mode": parts[5],
                     "ms_per_step": b["real_time"], "tflops": b["TFLOP/s"], "mfu": b["MFU"],
                     "replayed": int(b["replayed"]), "skipped": int(b["skipped"]), "peak_gib": b["peak_GiB"]})
    return rows, scaling, failures, " ".join([f"{build}/bin/bench_mfu"] + command[1:])


def torch_rows(only, precisions, modes, timeout):
    command = [sys.executable, str(ROOT / "bench" / "pytorch" / "mfu.py"), "--only", *only,
               "--precisions", *precisions, "--modes", *modes, "--timeout", str(timeout)]
    rows = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        for line in process.stdout:  # echoed as they come: compiling every configuration takes minutes
            print(line, end="", file=sys.stderr, flush=True)
            rows.append(json.loads(line))
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, command)
    return rows, " ".join(["python3 bench/pytorch/mfu.py"] + command[2:])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--only", nargs="*", default=["mlp_8192", "gpt2_small"])
    parser.add_argument("--precisions", nargs="*", default=["f32", "bf16", "f16"])
    parser.add_argument("--torch-modes", nargs="*", default=["eager", "compile-max-autotune", "compile-reduce-overhead"])
    parser.add_argument("--torch-f16-modes", nargs="*", default=["eager"])
    parser.add_argument("--torch-timeout", type=float, default=240, help="seconds for one PyTorch configuration")
    args = parser.parse_args()
    kestrel, scaling, failures, kestrel_command = kestrel_rows(args.build, args.only, args.precisions)
    torch, torch_commands = [], []
    for precision in args.precisions:  # f16 is there for its loss scaling: PyTorch's GradScaler, eager
        modes = args.torch_f16_modes if precision == "f16" else args.torch_modes
        if modes:
            rows, command = torch_rows(args.only, [precision], modes, args.torch_timeout)
            torch += rows
            torch_commands.append(command)
    torch_command = "; ".join(torch_commands)
    import torch as _torch  # the GPU's name for the record
    gpu = _torch.cuda.get_device_name(0)
    lines = ["| workload | precision | configuration | ms/step | TFLOP/s | MFU | Kestrel's speed vs this |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    summary = []
    best_kestrel = {}
    for k in kestrel:  # Kestrel's faster mode per workload and precision is the one compared
        key = (k["workload"], k["precision"])
        if key not in best_kestrel or k["ms_per_step"] < best_kestrel[key]["ms_per_step"]:
            best_kestrel[key] = k
    for k in kestrel:
        lines.append(f"| {k['workload']} | {k['precision']} | Kestrel {k['mode']} ({k['replayed']} replays"
                     f"{', %d skipped' % k['skipped'] if k['precision'] == 'f16' else ''}, peak {k['peak_gib']:.1f} GiB) | "
                     f"{k['ms_per_step']:.2f} | {k['tflops']:.0f} | {k['mfu']:.1%} | |")
    for k in best_kestrel.values():
        peers = [t for t in torch if t["workload"] == k["workload"] and t["precision"] == k["precision"]]
        for t in peers:
            if "error" in t:
                lines.append(f"| {k['workload']} | {k['precision']} | PyTorch {t['mode']} | failed: {t['error']} | | | |")
                continue
            lines.append(f"| {k['workload']} | {k['precision']} | PyTorch {t['mode']} | {t['ms_per_step']:.2f} | {t['tflops']:.0f} | {t['mfu']:.1%} | "
                         f"{t['ms_per_step'] / k['ms_per_step']:.2f}x |")
        timed = [t for t in peers if "error" not in t]
        if timed:
            best = min(timed, key=lambda t: t["ms_per_step"])
            summary.append(f"- {k['workload']} {k['precision']}: Kestrel ({k['mode']}) {k['mfu']:.1%} MFU; best PyTorch "
                           f"({best['mode']}) {best['mfu']:.1%}; Kestrel at {best['ms_per_step'] / k['ms_per_step']:.2f}x "
                           f"its speed.")
    for k in best_kestrel.values():
        if k["precision"] == "f16" and k["workload"].split("/")[0] in scaling:
            cost = scaling[k["workload"].split("/")[0]]
            summary.append(f"- {k['workload']} f16: loss scaling (seed, overflow check, scale update) "
                           f"{cost:.3f} ms of the {k['ms_per_step']:.2f} ms step ({cost / k['ms_per_step']:.1%}).")
    by_mode = {(k["workload"], k["precision"], k["mode"]): k["ms_per_step"] for k in kestrel}
    for (workload, precision, mode), ms in by_mode.items():  # issue 17: NCCL at world size 1, at most +3%
        eager = by_mode.get((workload, precision, "eager"))
        if mode == "eager_nccl1" and eager:
            summary.append(f"- {workload} {precision}: one rank of a data-parallel run (NCCL, world size 1, bucketed "
                           f"gradient sums) {ms:.2f} ms against the eager step's {eager:.2f} ms "
                           f"({ms / eager - 1:+.1%}; target at most +3%).")
    path, date = result_path("mfu")
    write(path, [
        f"# Model-FLOPs utilisation, Kestrel and PyTorch side by side, {date}",
        "",
        f"GPU: {gpu}. PyTorch {_torch.__version__}. MFU = model FLOPs per step (6 per weight of every product per "
        "sample or token, plus 12·L·T·d per token for attention: PaLM's accounting) / step time / 989.4 TFLOP/s "
        "(the H100 SXM's dense bf16 peak), for every precision. f32 is strict f32 on both sides (no TF32).",
        "",
        f"Commands: `python3 bench/mfu.py {' '.join(sys.argv[1:])}`, which ran `{kestrel_command}` and `{torch_command}`.",
        "",
        *lines,
        "",
        *summary,
        *([f"- Kestrel benchmarks that failed: {'; '.join(failures)}."] if failures else []),
    ])


if __name__ == "__main__":
    main()
