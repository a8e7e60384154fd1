#!/usr/bin/env python3
"""Launches per training step on the CPU plugin, for one or more kestrel binaries side by side: each run
config trains 2 and then 3 steps under KESTREL_CPU_PROFILE=1, and the difference of the profile's launch
totals is one (replayed) step, set-up and evaluation cancelling out. The ops are the ones any backend gets,
so the counts stand for a GPU's launches too.

    python3 bench/launches_per_step.py                                # this build
    python3 bench/launches_per_step.py --kestrel /tmp/old/build/bin/kestrel build/bin/kestrel
"""
import argparse
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = [("fashion_mlp", "f32", 64), ("fashion_convnet", "f32", 64), ("lstm_generator", "f32", 64),
         ("gpt_char", "f32", 8), ("gpt_char", "bf16", 8), ("transformer_classifier", "f32", 64)]


def launches(binary, model, precision, steps, test_subset):
    command = [binary, "train", f"models/{model}.train.json", "--backend", "cpu", "--precision", precision,
               "--max-steps", str(steps), "--epochs", "100", "--train-subset", "512", "--test-subset",
               str(test_subset), "--quiet", "--out", "/tmp/kestrel-launches-per-step"]
    err = subprocess.run(command, cwd=ROOT, env={"KESTREL_CPU_PROFILE": "1", "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True).stderr
    found = (re.match(r"\s+(.*?)\s+(\d+) launches", line) for line in err.splitlines())
    return sum(int(m.group(2)) for m in found if m)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kestrel", nargs="+", default=[str(ROOT / "build" / "bin" / "kestrel")])
    args = parser.parse_args()
    print("| model | precision | " + " | ".join(args.kestrel) + " |")
    print("| --- | --- |" + " --- |" * len(args.kestrel))
    for model, precision, test_subset in CASES:
        counts = [launches(b, model, precision, 3, test_subset) - launches(b, model, precision, 2, test_subset)
                  for b in args.kestrel]
        print(f"| {model} | {precision} | " + " | ".join(map(str, counts)) + " |", flush=True)


if __name__ == "__main__":
    main()
