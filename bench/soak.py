#!/usr/bin/env python3
"""A long training run watched from outside: `kestrel train` for --steps optimizer steps (default 10^5)
of the Fashion-MNIST MLP, with everything a long run does — the loader's worker threads, captured-step
replay, an evaluation and a checkpoint at every epoch's end, checkpoints every 500 steps, the
metrics log — while its resident memory (VmRSS) is sampled twice a second. Memory that grows with
steps is a leak; the target is growth <= 5% from the end of the first tenth of the run (allocations
warmed up) to its end. Writes bench/results/<date>-<host>-soak.md with the command.

    python3 bench/soak.py [--build build] [--backend cpu] [--steps 100000]
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
    parser.add_argument("--config", default="models/fashion_mlp.train.json")
    args = parser.parse_args()
    out = pathlib.Path(tempfile.mkdtemp(prefix="kestrel_soak_"))
    command = [str(ROOT / args.build / "bin" / "kestrel"), "train", str(ROOT / args.config), "--backend", args.backend,
               "--epochs", "1000", "--max-steps", str(args.steps), "--out", str(out), "--quiet"]
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
    path, date = result_path("soak")
    shown = " ".join(["python3 bench/soak.py", "--build", args.build, "--backend", args.backend, "--steps",
                      str(args.steps)])
    write(path, [
        f"# Soak: {summary['steps']} training steps of {summary['model']} on {summary['device']} ({date})",
        "",
        f"Command: `{shown}` (runs `{' '.join(command[1:3])} --backend {args.backend} --epochs 1000 "
        f"--max-steps {args.steps} --quiet`)",
        "",
        f"{summary['steps']} steps ({summary['epochs']} epochs, each ending with an evaluation of the 10,000 test "
        f"images and a checkpoint; checkpoints every 500 steps besides) in {seconds:.0f} s; "
        f"{summary['replayed_steps']} steps replayed from the captured step; final test accuracy "
        f"{summary.get('test_accuracy', float('nan')) * 100:.2f}%.",
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
