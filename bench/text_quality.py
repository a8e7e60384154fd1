#!/usr/bin/env python3
"""Quality of the text models against PyTorch, each trained with `kestrel train` (its run config) and with
the same recipe in PyTorch (bench/pytorch/train_text_reference.py, with the interpreter given by --pytorch)
for the same seeds; writes bench/results/<date>-<host>-text-quality[-<model>].md with every run, the means
and issue 15's verdicts:
- the character language models gpt_char and lstm_generator on the fortunes corpus, cut to --max-steps
  steps (the cosine schedule spans them): validation loss (nats per character over every held-out
  window), bits per character and perplexity; Kestrel's mean within 0.02 nats of PyTorch's?
- rnn_classifier and transformer_classifier on four fortune categories, the configs' 10 epochs:
  validation accuracy; Kestrel's mean within 0.5 point of PyTorch's?

    python3 bench/text_quality.py --pytorch /path/to/python-with-torch [--build build] [--backend cpu]
                                  [--only gpt_char|lstm_generator|rnn_classifier|transformer_classifier] [--seeds 42 43 7]
                                  [--max-steps 300]
"""
import argparse
import datetime
import json
import math
import pathlib
import platform
import statistics
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIGS = {"gpt_char": "models/gpt_char.train.json", "lstm_generator": "models/lstm_generator.train.json",
           "rnn_classifier": "models/rnn_classifier.train.json",
           "transformer_classifier": "models/transformer_classifier.train.json"}
CLASSIFIERS = {"rnn_classifier", "transformer_classifier"}  # judged on accuracy over the config's epochs; the others on loss over --max-steps
TARGET_NATS, TARGET_POINTS = 0.02, 0.5


def steps_of(args, name):
    return 0 if name in CLASSIFIERS else args.max_steps


def kestrel_loss(args, name, seed):
    out = ROOT / "runs" / f"bench-text-{name}-seed{seed}"
    binary = ROOT / args.build / "bin" / "kestrel"
    command = [str(binary), "train", CONFIGS[name], "--no-progress", "--out", str(out), "--seed", str(seed)]
    if steps_of(args, name):
        # --max-steps only shortens a run (these configs train one epoch); the PyTorch reference runs all
        # of them, so epochs enough that this run does too.
        command += ["--epochs", "1000", "--max-steps", str(steps_of(args, name))]
    if args.backend:
        command += ["--backend", args.backend]
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    summary = json.loads((out / "summary.json").read_text())
    shown = " ".join(command).replace(str(binary), f"{args.build}/bin/kestrel").replace(str(ROOT) + "/", "")
    return summary, shown


def pytorch_losses(args, name):
    command = [args.pytorch, "bench/pytorch/train_text_reference.py", CONFIGS[name], "--seeds", *map(str, args.seeds),
               "--max-steps", str(steps_of(args, name)), "--device", "cuda" if args.backend.startswith("cuda") else "cpu"]
    lines = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True).stdout.splitlines()
    runs = [json.loads(line) for line in lines if '"seed"' in line]
    return {run["seed"]: run for run in runs}, " ".join(["python3", *command[1:]])


def figures(loss):
    return f"{loss:.4f} ({loss / math.log(2):.3f} bits, perplexity {math.exp(loss):.2f})"


def classifier_section(args, name, reference, reference_command):
    rows, ours = [], []
    for seed in args.seeds:
        summary, shown = kestrel_loss(args, name, seed)
        ours.append(summary["test_accuracy"])
        theirs = reference[seed]
        rows.append(f"| {seed} | {summary['test_accuracy'] * 100:.2f}% (loss {summary['test_loss']:.4f}) | "
                    f"{theirs['validation_accuracy'] * 100:.2f}% (loss {theirs['validation_loss']:.4f}) | "
                    f"{summary['seconds']:.0f} s | {theirs['seconds']} s | `{shown}` |")
        print(rows[-1], flush=True)
    torch_runs = [r["validation_accuracy"] for r in reference.values()]
    mean, torch_mean = statistics.mean(ours), statistics.mean(torch_runs)
    gap = (mean - torch_mean) * 100
    return [f"## {name} ({CONFIGS[name]}), the config's epochs", "",
            "| seed | Kestrel validation accuracy | PyTorch, same recipe and seed | Kestrel time | PyTorch time | command |",
            "| --- | --- | --- | --- | --- | --- |", *rows, "",
            f"Means over {len(ours)} seeds: Kestrel **{mean * 100:.2f}%**, PyTorch **{torch_mean * 100:.2f}%**; "
            f"Kestrel - PyTorch = {gap:+.2f} points: within {TARGET_POINTS} point of PyTorch's mean: "
            f"**{'yes' if abs(gap) <= TARGET_POINTS else 'NO'}**. Spread over seeds: Kestrel "
            f"{min(ours) * 100:.2f}-{max(ours) * 100:.2f}%, PyTorch {min(torch_runs) * 100:.2f}-{max(torch_runs) * 100:.2f}%.",
            "", f"PyTorch: torch {next(iter(reference.values()))['torch']}; `{reference_command}`.", ""]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pytorch", required=True, help="a Python interpreter with torch")
    parser.add_argument("--build", default="build")
    parser.add_argument("--backend", default="")
    parser.add_argument("--only", choices=sorted(CONFIGS), default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 7])
    parser.add_argument("--max-steps", type=int, default=300)
    args = parser.parse_args()
    lines = []
    for name in CONFIGS:
        if args.only and name != args.only:
            continue
        reference, reference_command = pytorch_losses(args, name)
        if name in CLASSIFIERS:
            lines += classifier_section(args, name, reference, reference_command)
            continue
        rows, ours = [], []
        for seed in args.seeds:
            summary, shown = kestrel_loss(args, name, seed)
            ours.append(summary["test_loss"])
            rows.append(f"| {seed} | {figures(summary['test_loss'])} | {figures(reference[seed]['validation_loss'])} | "
                        f"{summary['seconds']:.0f} s | {reference[seed]['seconds']} s | `{shown}` |")
            print(rows[-1], flush=True)
        mean, torch_mean = statistics.mean(ours), statistics.mean(r["validation_loss"] for r in reference.values())
        gap = mean - torch_mean
        lines += [f"## {name} ({CONFIGS[name]}), {args.max_steps} steps", "",
                  "| seed | Kestrel validation loss (nats/char) | PyTorch, same recipe and seed | Kestrel time | "
                  "PyTorch time | command |",
                  "| --- | --- | --- | --- | --- | --- |", *rows, "",
                  f"Means over {len(ours)} seeds: Kestrel **{figures(mean)}**, PyTorch **{figures(torch_mean)}**; "
                  f"Kestrel - PyTorch = {gap:+.4f} nats/char: within {TARGET_NATS} of PyTorch's mean: "
                  f"**{'yes' if abs(gap) <= TARGET_NATS else 'NO'}**. Spread over seeds: Kestrel "
                  f"{min(ours):.4f}-{max(ours):.4f}, PyTorch "
                  f"{min(r['validation_loss'] for r in reference.values()):.4f}-"
                  f"{max(r['validation_loss'] for r in reference.values()):.4f}.", "",
                  f"PyTorch: torch {next(iter(reference.values()))['torch']}; `{reference_command}`. Seeds do not give "
                  "the two frameworks the same initial weights, sample order or dropout masks: compare the means and "
                  "spreads, not the rows.", ""]
    date = datetime.date.today().isoformat()
    host = platform.node() or "host"
    path = ROOT / "bench" / "results" / f"{date}-{host}-text-quality{'-' + args.only if args.only else ''}.md"
    path.write_text("\n".join([
        "# Text models' quality against PyTorch",
        "",
        f"Date: {date}. Host: {platform.machine()}. Produced by `python3 bench/text_quality.py --pytorch PYTHON"
        f"{' --backend ' + args.backend if args.backend else ''}{' --only ' + args.only if args.only else ''}"
        f" --seeds {' '.join(map(str, args.seeds))} --max-steps {args.max_steps}`.",
        "Data: Debian's fortunes. Language models: every file but the .dat indexes, characters, 128 per window, "
        "the last 10% of every file held out (2013 windows); each run config's model, optimizer, schedule and "
        f"batch, cut to {args.max_steps} steps (the cosine schedule spans them); the loss over every held-out "
        "position. Categories: computers, definitions, people, science, 625 documents each, the first 256 "
        "characters left-padded, the last 10% of each held out (252 documents); the config's recipe whole.",
        "",
        *lines,
    ]))
    print(path.read_text())


if __name__ == "__main__":
    main()
