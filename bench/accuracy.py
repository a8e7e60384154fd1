#!/usr/bin/env python3
"""Full-size accuracy runs: Fashion-MNIST, batch 64, Adam 1e-3 (epochs and schedule from each run config),
on the best available backend.

Trains the seeds' MLP (target >= 88.5% test accuracy) and ConvNet (target >= 91.0%), and the LSTM reading
images row by row (no fixed target: judged against PyTorch's mean, within 0.5 point) with `kestrel train`
for one or more seeds and writes bench/results/<date>-<host>-fashion-accuracy[-<model>].md with every
run, the mean over seeds (what the target is judged on: single runs of the same recipe spread by a few
tenths of a point) and the commands. With --pytorch PYTHON, the same recipe also runs in PyTorch
(bench/pytorch/train_reference.py, with that interpreter) for the same seeds, as a reference.

    python3 bench/accuracy.py [--build build] [--backend cpu] [--only mlp|convnet|lstm] [--seeds 42 43 7]
                              [--pytorch /path/to/python-with-torch]
"""
import argparse
import datetime
import json
import pathlib
import platform
import statistics
import subprocess
import time

RUNS = {
    "mlp": ("models/fashion_mlp.train.json", "models/fashion_mlp.json", 0.885),
    "convnet": ("models/fashion_convnet.train.json", "models/convnet.json", 0.910),
    "lstm": ("models/lstm_fashion.train.json", "models/lstm_fashion.json", None),  # against PyTorch's mean
}
ROOT = pathlib.Path(__file__).resolve().parent.parent


def kestrel_run(args, name, config, seed):
    out = ROOT / "runs" / f"bench-{name}-seed{seed}"
    binary = ROOT / args.build / "bin" / "kestrel"
    command = [str(binary), "train", config, "--no-progress", "--out", str(out), "--seed", str(seed)]
    if args.backend:
        command += ["--backend", args.backend]
    subprocess.run(command, cwd=ROOT, check=True)
    summary = json.loads((out / "summary.json").read_text())
    shown = " ".join(command).replace(str(binary), f"{args.build}/bin/kestrel").replace(str(ROOT) + "/", "")
    return summary, shown


def schedule_of(config):
    """The config's learning-rate schedule, as train_reference.py's --schedule mirrors it."""
    schedule = json.loads((ROOT / config).read_text()).get("schedule", {"type": "constant"})
    if schedule.get("type", "constant") not in ("constant", "cosine") or schedule.get("warmup_steps", 0) or \
            schedule.get("min_lr", 0):
        raise SystemExit(f"{config}: /schedule: the PyTorch reference mirrors only 'constant' and 'cosine' "
                         "without warm-up or min_lr; drop --pytorch or simplify the schedule")
    return schedule.get("type", "constant")


def reference_device(args):
    """PyTorch runs on the GPU when Kestrel is asked for CUDA, else on the CPU."""
    return "cuda" if args.backend.startswith("cuda") else "cpu"


def pytorch_runs(args, config, model_file):
    epochs = json.loads((ROOT / config).read_text()).get("epochs", 1)
    command = [args.pytorch, "bench/pytorch/train_reference.py", model_file, "--seeds", *map(str, args.seeds),
               "--schedule", schedule_of(config), "--epochs", str(epochs),
               "--device", reference_device(args)]
    lines = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True).stdout.splitlines()
    runs = [json.loads(line) for line in lines if '"seed"' in line]
    return {run["seed"]: run for run in runs}, " ".join(["python3", *command[1:]])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--backend", default="")
    parser.add_argument("--only", choices=sorted(RUNS), default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42])
    parser.add_argument("--pytorch", default="", help="a Python interpreter with torch, for the reference runs")
    parser.add_argument("--suffix", default="", help="appended to the result file's name (keeps earlier results)")
    args = parser.parse_args()
    lines = []
    for name, (config, model_file, target) in RUNS.items():
        if args.only and name != args.only:
            continue
        reference, reference_command = pytorch_runs(args, config, model_file) if args.pytorch else ({}, "")
        rows, accuracies = [], []
        for seed in args.seeds:
            started = time.time()
            summary, shown = kestrel_run(args, name, config, seed)
            accuracies.append(summary["test_accuracy"])
            torch_cell = f"{reference[seed]['test_accuracy'] * 100:.2f}%" if seed in reference else "-"
            rows.append(f"| {seed} | {summary['device']} ({summary['device_name']}) | {summary['epochs']} | "
                        f"{summary['test_accuracy'] * 100:.2f}% | {torch_cell} | {summary['seconds']:.0f} s | "
                        f"{summary.get('replayed_steps', 0)} | `{shown}` |")
            print(rows[-1], f"(wall {time.time() - started:.0f} s)", flush=True)
        mean = statistics.mean(accuracies)
        torch_mean = statistics.mean(r["test_accuracy"] for r in reference.values()) if reference else None
        if target is None:  # judged against PyTorch: within 0.5 point of its mean
            verdict = (f"within 0.5 point of PyTorch's mean: **{'yes' if abs(mean - torch_mean) <= 0.005 else 'NO'}**"
                       if torch_mean is not None else "no fixed target (run with --pytorch to compare)")
        else:
            verdict = f"target {target * 100:.1f}% **{'met' if mean >= target else 'NOT met'}** on the mean"
        epochs = json.loads((ROOT / config).read_text()).get("epochs", 1)
        lines += [
            f"## {name} ({model_file}), {epochs} epochs, " + (f"target {target * 100:.1f}%" if target else "against PyTorch"),
            "",
            f"Learning-rate schedule: {schedule_of(config)} (from {config}).",
            "",
            "| seed | device | epochs | Kestrel test accuracy | PyTorch, same recipe and seed | Kestrel time | replayed steps | command |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
            *rows,
            "",
            f"Kestrel mean over {len(accuracies)} seed(s): **{mean * 100:.2f}%** (min {min(accuracies) * 100:.2f}%, "
            f"max {max(accuracies) * 100:.2f}%) — {verdict}.",
        ]
        if torch_mean is not None:
            lines += ["", f"PyTorch mean over the same seeds: {torch_mean * 100:.2f}% "
                          f"(torch {next(iter(reference.values()))['torch']}, {reference_device(args)}; `{reference_command}`). "
                          "Seeds do not give the two frameworks the same initial weights or sample order: "
                          "compare the means and spreads, not the rows."]
        lines.append("")
    date = datetime.date.today().isoformat()
    host = platform.node() or "host"
    path = ROOT / "bench" / "results" / f"{date}-{host}-fashion-accuracy{'-' + args.only if args.only else ''}{args.suffix}.md"
    path.write_text("\n".join([
        "# Fashion-MNIST accuracy, full runs",
        "",
        f"Date: {date}. Host: {platform.machine()}. Produced by `python3 bench/accuracy.py"
        f"{' --backend ' + args.backend if args.backend else ''}{' --only ' + args.only if args.only else ''}"
        f" --seeds {' '.join(map(str, args.seeds))}{' --pytorch PYTHON' if args.pytorch else ''}"
        f"{' --suffix ' + args.suffix if args.suffix else ''}`.",
        "Data: Debian's dataset-fashion-mnist (60000 train / 10000 test), normalised with mean 0.2860, std 0.3530.",
        "Training: batch 64, Adam lr 1e-3 (schedule and epochs below, from the run configs); test accuracy after "
        "the last epoch.",
        "",
        *lines,
    ]))
    print(path.read_text())


if __name__ == "__main__":
    main()
