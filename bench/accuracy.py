#!/usr/bin/env python3
"""Full-size accuracy runs: Fashion-MNIST, 10 epochs, batch 64, Adam 1e-3, on the best available backend.

Trains the seeds' MLP (target >= 88.5% test accuracy) and ConvNet (target >= 91.0%) with `kestrel train`
and writes bench/results/<date>-<host>-fashion-accuracy.md with the figures and the commands.

    python3 bench/accuracy.py [--build build] [--backend cpu] [--only mlp|convnet] [--seed N]
"""
import argparse
import datetime
import json
import pathlib
import platform
import subprocess
import time

RUNS = {
    "mlp": ("models/fashion_mlp.train.json", 0.885),
    "convnet": ("models/fashion_convnet.train.json", 0.910),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--backend", default="")
    parser.add_argument("--only", choices=sorted(RUNS), default=None)
    parser.add_argument("--seed", type=int, default=None, help="override the configs' seed (42)")
    args = parser.parse_args()
    root = pathlib.Path(__file__).resolve().parent.parent
    rows = []
    for name, (config, target) in RUNS.items():
        if args.only and name != args.only:
            continue
        out = root / "runs" / f"bench-{name}"
        command = [str(root / args.build / "bin" / "kestrel"), "train", config, "--no-progress", "--out", str(out)]
        if args.backend:
            command += ["--backend", args.backend]
        if args.seed is not None:
            command += ["--seed", str(args.seed)]
        started = time.time()
        subprocess.run(command, cwd=root, check=True)
        summary = json.loads((out / "summary.json").read_text())
        shown = " ".join(c if c != str(root / args.build / "bin" / "kestrel") else f"{args.build}/bin/kestrel" for c in command)
        shown = shown.replace(str(root) + "/", "")
        accuracy = summary["test_accuracy"]
        rows.append(f"| {summary['model']} | {summary['device']} ({summary['device_name']}) | {summary['epochs']} | "
                    f"{accuracy * 100:.2f}% | {target * 100:.1f}% | {'met' if accuracy >= target else 'NOT met'} | "
                    f"{summary['seconds']:.0f} s | `{shown}` |")
        print(rows[-1], f"(wall {time.time() - started:.0f} s)")
    date = datetime.date.today().isoformat()
    host = platform.node() or "host"
    suffix = (f"-{args.only}" if args.only else "") + (f"-seed{args.seed}" if args.seed is not None else "")
    path = root / "bench" / "results" / f"{date}-{host}-fashion-accuracy{suffix}.md"
    path.write_text("\n".join([
        "# Fashion-MNIST accuracy, full runs",
        "",
        f"Date: {date}. Host: {platform.machine()}. Produced by `python3 bench/accuracy.py"
        f"{' --backend ' + args.backend if args.backend else ''}{' --only ' + args.only if args.only else ''}"
        f"{' --seed ' + str(args.seed) if args.seed is not None else ''}`.",
        "Data: Debian's dataset-fashion-mnist (60000 train / 10000 test), normalised with mean 0.2860, std 0.3530.",
        f"Training: batch 64, Adam lr 1e-3, seed {42 if args.seed is None else args.seed}, 10 epochs; test accuracy after the last epoch.",
        "",
        "| model | device | epochs | test accuracy | target | | training time | command |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
    ]))
    print(path.read_text())


if __name__ == "__main__":
    main()
