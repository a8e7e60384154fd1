#!/usr/bin/env python3
"""The seeds' headline, measured: training-step time of every workload on every backend, the speedup
over Kestrel's CPU backend, and PyTorch on the same machine when it is installed. One command runs
Kestrel's suite (build/bin/bench_train) and PyTorch's (bench/pytorch/workloads.py) and writes
bench/results/<date>-<host>.md with the table ("CPU time / other time / speedup"), .json and .svg.

    python3 bench/speedup.py                  # full run
    python3 bench/speedup.py --quick          # smoke run: one short repetition (proves it works)
    python3 bench/speedup.py --no-pytorch     # Kestrel only
    python3 bench/speedup.py --device cuda    # one backend's devices only (a GPU lease's few minutes)
    python3 bench/speedup.py --device cuda --only convnet   # and only the workloads whose name has this
"""
import argparse
import datetime
import importlib.util
import json
import pathlib
import platform
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def kestrel_times(build, quick, device, only):
    command = [str(ROOT / build / "bin" / "bench_train"), "--benchmark_format=json"]
    command += (["--benchmark_min_time=0.01"] if quick
                else ["--benchmark_repetitions=3", "--benchmark_report_aggregates_only=true"])
    # Only the steps as the trainer runs them (not bench_train's eager, composed and GEMM-floor variants,
    # which other scripts read); the smoke run leaves out the sequence models (a step of them on a
    # software GPU takes a minute).
    workloads = "(seeds_mlp|fashion)[^/]*" if quick else f"[^/]*{only}[^/]*"
    command.append(f"--benchmark_filter=^train_step/{workloads}/{device}")
    report = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    rows = {}
    for row in report["benchmarks"]:
        if not quick and row.get("aggregate_name") != "median":
            continue
        parts = row["run_name"].split("/")  # train_step/<workload>/<backend>/b<batch>/real_time
        workload, backend, batch = parts[1], parts[2], parts[3]
        if backend.startswith("gemms-only") or parts[0] != "train_step":
            continue  # the GEMM floor and eager variants of bench/cpu_step_overhead.py
        rows.setdefault(f"{workload}/{batch}", {})[f"kestrel:{backend}"] = row["real_time"]
    return rows, " ".join(c.replace(str(ROOT) + "/", "") for c in command)


def pytorch_times(quick, only_device, only):
    """{workload: {backend: ms}}, the commands as shown, and the configurations that failed with their errors."""
    if importlib.util.find_spec("torch") is None:
        return {}, "PyTorch is not installed here: no PyTorch columns", []
    script = ROOT / "bench" / "pytorch" / "workloads.py"
    import torch  # noqa: F401  (only to pick the devices)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    devices = [d for d in devices if not only_device or d == only_device]
    rows, commands, failures = {}, [], []
    for device in devices:
        command = [sys.executable, str(script), "--device", device, "--steps", "3" if quick else "30"]
        if not quick:  # eager with fused Adam, and the whole step compiled (bench/pytorch/workloads.py)
            command.append("--compile")
        if only:
            command += ["--only", only]
        commands.append(" ".join(command[1:]).replace(str(ROOT) + "/", ""))
        # Each configuration's line is echoed as it comes, so a run cut short (a GPU lease's limit) still
        # shows what it measured.
        with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
            lines = []
            for line in process.stdout:
                print(line, end="", file=sys.stderr, flush=True)
                lines.append(line)
        if process.returncode:
            raise subprocess.CalledProcessError(process.returncode, command)
        for line in lines:
            r = json.loads(line)
            if "error" in r:
                failures.append(f"{r['workload']} {r['backend']}: {r['error']}")
            else:
                rows.setdefault(r["workload"], {})[r["backend"]] = r["ms_per_step"]
    return rows, "; ".join(commands), failures


def against_best_pytorch(table):
    """Per workload and device, PyTorch's fastest configuration and Kestrel's speed relative to it
    (its time / Kestrel's: above 1, Kestrel is faster)."""
    lines = []
    for workload, times in table.items():
        for device in ("cpu", "cuda"):
            torch_times = {b: t for b, t in times.items() if b.startswith("pytorch-") and b.endswith(":" + device)}
            kestrel = times.get(f"kestrel:{device}:0")
            if torch_times and kestrel:
                best = min(torch_times, key=torch_times.get)
                lines.append(f"| {workload} | {device} | {best.split(':')[0][len('pytorch-'):]} | {torch_times[best]:.3f} | "
                             f"{kestrel:.3f} | {torch_times[best] / kestrel:.2f}x |")
    if not lines:
        return []
    return ["Against PyTorch's fastest configuration on the same device (its time / Kestrel's):", "",
            "| workload | device | best PyTorch | its ms | Kestrel ms | Kestrel's speed |",
            "| --- | --- | --- | --- | --- | --- |", *lines, ""]


def svg(table, backends):
    width, bar, gap = 760, 12, 10
    height = 30 + len(table) * (len(backends) * bar + gap)
    top = max(v for r in table.values() for v in r.values())
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' font-family='sans-serif' font-size='11'>",
           "<rect width='100%' height='100%' fill='white'/>", "<text x='10' y='16'>training-step time (ms, linear)</text>"]
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    y = 30
    for workload, times in table.items():
        out.append(f"<text x='10' y='{y + bar}'>{workload}</text>")
        for k, backend in enumerate(backends):
            if backend in times:
                w = max(1, times[backend] / top * (width - 360))
                out.append(f"<rect x='170' y='{y}' width='{w:.1f}' height='{bar - 2}' fill='{colours[k % 6]}'/>")
                out.append(f"<text x='{175 + w:.1f}' y='{y + bar - 3}'>{backend} {times[backend]:.2f}</text>")
            y += bar
        y += gap
    out.append("</svg>")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-pytorch", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--device", default="", help="only this backend's devices (cpu, cuda), both frameworks")
    parser.add_argument("--only", default="", help="only the workloads whose name contains this, both frameworks")
    args = parser.parse_args()
    table, kestrel_command = kestrel_times(args.build, args.quick, args.device, args.only)
    devices = json.loads(subprocess.run([str(ROOT / args.build / "bin" / "kestrel"), "devices", "--json"], check=True,
                                        capture_output=True, text=True).stdout)
    device_names = [f"{p['name']}:{d['index']} = {d['name']} ({d['kind']}, {d['runtime']})"
                    for p in devices["plugins"] if p["status"] == "loaded" for d in p["devices"]]
    torch_command, failures = "not run (--no-pytorch)", []
    if not args.no_pytorch:
        torch_rows, torch_command, failures = pytorch_times(args.quick, args.device, args.only)
        for workload, times in torch_rows.items():
            table.setdefault(workload, {}).update(times)
    backends = sorted({b for r in table.values() for b in r}, key=lambda b: (not b.startswith("kestrel:cpu"), b))
    reference = "kestrel:cpu:0"
    lines = ["| workload | " + " | ".join(f"{b} (ms)" for b in backends) + " | " +
             " | ".join(f"speedup {b}" for b in backends if b != reference) + " |",
             "| --- " * (1 + 2 * len(backends) - 1) + "|"]
    for workload, times in table.items():
        cells = [f"{times[b]:.2f}" if b in times else "" for b in backends]
        speedups = [f"{times[reference] / times[b]:.2f}x" if b in times and reference in times else ""
                    for b in backends if b != reference]
        lines.append(f"| {workload} | " + " | ".join(cells) + " | " + " | ".join(speedups) + " |")
    date = datetime.date.today().isoformat()
    host = platform.node() or "host"
    subset = "".join(f"-{part}" for part in (args.device, args.only) if part)
    stem = pathlib.Path(args.out) / f"{date}-{host}{subset}{'-quick' if args.quick else ''}"
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps({"date": date, "host": host, "ms_per_step": table}, indent=2) + "\n")
    stem.with_suffix(".svg").write_text(svg(table, backends) + "\n")
    stem.with_suffix(".md").write_text("\n".join([
        f"# Training-step times and speedups, {date} on {host}",
        "",
        f"Machine: {platform.machine()}, {platform.processor() or 'cpu'}. One full training step (zero grad, forward, "
        "loss, backward, Adam update, synchronise), median over repetitions, f32; speedup = Kestrel CPU time / time.",
        "",
        f"Devices: {'; '.join(device_names)}.",
        "",
        f"Commands: `python3 bench/speedup.py{' --quick' if args.quick else ''}{' --device ' + args.device if args.device else ''}"
        f"{' --only ' + args.only if args.only else ''}`, "
        f"which ran `{kestrel_command}` and "
        f"{torch_command}.",
        "",
        *lines,
        "",
        *against_best_pytorch(table),
        *([f"PyTorch configurations that failed: {'; '.join(failures)}.", ""] if failures else []),
        f"Plot: `{stem.with_suffix('.svg').name}`.",
        "",
    ]))
    print(stem.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
