#!/usr/bin/env python3
"""A long training run watched from outside: `kestrel train` for --steps optimizer steps (default 10^5)
with everything a long run does — the loader's worker threads started every epoch, captured-step
replay, an evaluation and a checkpoint at every epoch's end, checkpoints every `every_steps`, the
metrics log — while its resident memory (VmRSS) is sampled twice a second. Memory that grows with
steps is a leak; the target is growth <= 5% from the end of the first tenth of the run (allocations
warmed up) to its end. The default config, the seeds' linear regression (32 steps an epoch), turns
10^5 steps into 3125 epochs, so per-epoch resources are churned thousands of times; --config
models/fashion_mlp.train.json soaks a real dataset (938 steps an epoch). Writes
bench/results/<date>-<host>-soak-<config name>.md with the command.

    python3 bench/soak.py [--build build] [--backend cpu] [--steps 100000] [--config CONFIG]
"""
import argparse
import json
import pathlib
import subprocess
import tempfile
import time

from benchlib import ROOT, result_path, write


def rss_kib(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--steps", type=int, default=100000)
    parser.add_argument("--config", default="models/linear_regression.train.json")
    args = parser.parse_args()
    out = pathlib.Path(tempfile.mkdtemp(prefix="kestrel_soak_"))
    command = [str(ROOT / args.build / "bin" / "kestrel"), "train", str(ROOT / args.config), "--backend", args.backend,
               "--epochs", "1000000", "--max-steps", str(args.steps), "--out", str(out), "--quiet"]
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    samples = []  # (seconds, KiB)
    while process.poll() is None:
        try:
            samples.append((time.monotonic() - start, rss_kib(process.pid)))
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.5)
    output = process.stdout.read()
    if process.returncode != 0:
        raise SystemExit(f"the run failed ({process.returncode}):\n{output}")
    seconds = time.monotonic() - start
    summary = json.loads((out / "summary.json").read_text())
    samples = [s for s in samples if s[1] > 0]
    warm = next(kib for t, kib in samples if t >= seconds * 0.1)
    late = [kib for t, kib in samples if t >= seconds * 0.9]
    end = max(late)
    growth = (end / warm - 1) * 100
    peak = max(kib for _, kib in samples)
    quarters = [next(kib for t, kib in samples if t >= seconds * q) for q in (0.1, 0.25, 0.5, 0.75)]
    name = pathlib.Path(args.config).name.split(".")[0]
    path, date = result_path(f"soak-{name}")
    shown = " ".join(["python3 bench/soak.py", "--build", args.build, "--backend", args.backend, "--steps",
                      str(args.steps), "--config", args.config])
    write(path, [
        f"# Soak: {summary['steps']} training steps of {summary['model']} on {summary['device']} ({date})",
        "",
        f"Command: `{shown}` (runs `kestrel train {args.config} --backend {args.backend} --epochs 1000000 "
        f"--max-steps {args.steps} --quiet`)",
        "",
        f"{summary['steps']} steps ({summary['epochs']} epochs, each ending with an evaluation of the test "
        f"data and a checkpoint) in {seconds:.0f} s, {summary['replayed_steps']} of them replayed from the "
        f"captured step; final test loss {summary['test_loss']:.4g}"
        + (f", accuracy {summary['test_accuracy'] * 100:.2f}%." if "test_accuracy" in summary else "."),
        "",
        "| resident memory (VmRSS) | MiB |",
        "|---|---|",
        *[f"| at {int(q * 100)}% of the run | {kib / 1024:.1f} |" for q, kib in zip((0.1, 0.25, 0.5, 0.75), quarters)],
        f"| largest in the last 10% of the run | {end / 1024:.1f} |",
        f"| peak | {peak / 1024:.1f} |",
        "",
        f"Growth from 10% of the run to its end: **{growth:+.2f}%** (target <= 5%): "
        f"{'met' if growth <= 5 else 'NOT met'}. {len(samples)} samples, every 0.5 s.",
    ])


if __name__ == "__main__":
    main()
