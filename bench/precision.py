#!/usr/bin/env python3
"""Mixed precision against f32: the same run config, seed and data trained with `--precision f32` and with
each lower precision, side by side, with `kestrel train`. Writes
bench/results/<date>-<host>-precision-<backend>-<models>-<precisions>.md: every run's final test accuracy (classifiers; target:
the lower precision's mean within 0.3 point of f32's) or test loss (language models; within 0.02 nats).

    python3 bench/precision.py [--build build] [--backend cpu] [--precisions bf16] [--seeds 42 43 7]
                               [--only mlp convnet gpt] [--mlp-epochs 10] [--convnet-epochs 2] [--convnet-steps 0]
                               [--gpt-steps 300]

A software device such as lavapipe trains the MLP at a few hundred samples/s and the ConvNet and gpt_char
at about a step a second and a step in ten: `--mlp-epochs 1 --convnet-steps 300 --gpt-steps 100` there.
"""
import argparse
import datetime
import json
import pathlib
import platform
import statistics
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent


def runs(args):
    """name -> (run config, extra flags, what is judged)."""
    return {
        "mlp": ("models/fashion_mlp.train.json", ["--epochs", str(args.mlp_epochs)] if args.mlp_epochs else [], "accuracy"),
        "convnet": ("models/fashion_convnet.train.json", ["--epochs", str(args.convnet_epochs)] +
                    (["--max-steps", str(args.convnet_steps)] if args.convnet_steps else []), "accuracy"),
        # --max-steps only shortens a run, and gpt_char's one epoch is 566 steps: epochs enough to run them all.
        "gpt": ("models/gpt_char.train.json", ["--epochs", "1000", "--max-steps", str(args.gpt_steps)], "loss"),
    }


def train(args, name, config, flags, precision, seed):
    out = ROOT / "runs" / f"bench-precision-{name}-{precision}-seed{seed}"
    binary = ROOT / args.build / "bin" / "kestrel"
    command = [str(binary), "train", config, "--no-progress", "--out", str(out), "--seed", str(seed),
               "--precision", precision, "--backend", args.backend, *flags]
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    summary = json.loads((out / "summary.json").read_text())
    shown = " ".join(command).replace(str(binary), f"{args.build}/bin/kestrel").replace(str(ROOT) + "/", "")
    return summary, shown


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--precisions", nargs="+", default=["bf16"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[42])
    parser.add_argument("--only", nargs="+", default=["mlp", "convnet", "gpt"])
    parser.add_argument("--mlp-epochs", type=int, default=0, help="0: the run config's 10")
    parser.add_argument("--convnet-epochs", type=int, default=2)
    parser.add_argument("--convnet-steps", type=int, default=0, help="stop after this many steps (0: every epoch's)")
    parser.add_argument("--gpt-steps", type=int, default=300)
    args = parser.parse_args()
    lines = []
    for name, (config, flags, judged) in runs(args).items():
        if name not in args.only:
            continue
        lines += [f"## {name}: `{config}` {' '.join(flags)}", "",
                  "| precision | seed | test accuracy | test loss | samples/s | command |", "| --- | --- | --- | --- | --- | --- |"]
        figures = {}
        for precision in ["f32", *args.precisions]:
            for seed in args.seeds:
                summary, shown = train(args, name, config, flags, precision, seed)
                accuracy = summary.get("test_accuracy", float("nan"))
                figures.setdefault(precision, []).append(accuracy if judged == "accuracy" else summary["test_loss"])
                lines.append(f"| {precision} | {seed} | {accuracy * 100:.2f}% | {summary['test_loss']:.4f} | "
                             f"{summary['samples_per_second']:.0f} | `{shown}` |")
                print(lines[-1], flush=True)
        lines.append("")
        base = statistics.mean(figures["f32"])
        for precision in args.precisions:
            mean = statistics.mean(figures[precision])
            if judged == "accuracy":
                gap = (mean - base) * 100
                # The target is to reach f32's accuracy within 0.3 points: doing better reaches it.
                verdict = "met" if gap >= -0.3 else "NOT met"
                lines.append(f"- {precision}: mean test accuracy {mean * 100:.2f}% against f32's {base * 100:.2f}% "
                             f"({gap:+.2f} points; target at most 0.3 below: **{verdict}**)")
            else:
                gap = mean - base
                verdict = "met" if gap <= 0.02 else "NOT met"
                lines.append(f"- {precision}: mean test loss {mean:.4f} nats against f32's {base:.4f} "
                             f"({gap:+.4f}; target at most 0.02 above: **{verdict}**)")
        lines.append("")
    date = datetime.date.today().isoformat()
    host = platform.node() or "host"
    path = ROOT / "bench" / "results" / f"{date}-{host}-precision-{args.backend}-{'-'.join(args.only)}-{'-'.join(args.precisions)}.md"
    path.write_text("\n".join([
        "# Mixed precision against f32",
        "",
        f"Date: {date}. Host: {platform.machine()}, backend {args.backend}. Produced by `python3 bench/precision.py "
        f"--backend {args.backend} --precisions {' '.join(args.precisions)} --seeds {' '.join(map(str, args.seeds))} "
        f"--only {' '.join(args.only)} --mlp-epochs {args.mlp_epochs} --convnet-epochs {args.convnet_epochs} --convnet-steps {args.convnet_steps} --gpt-steps {args.gpt_steps}`.",
        "Each lower precision follows torch.autocast's rule: the products (linear layers, convolutions, "
        "matmuls, attention, recurrent cells' GEMMs) run in that dtype with f32 accumulation and their results "
        "stay in it; softmax, norms, losses, reductions, pooling and the recurrent cells' gate math widen to "
        "f32; master weights, their gradients and the optimizer stay in f32. Same seed, same data order, same "
        "initial weights as the f32 run.",
        "",
        *lines,
    ]))
    print(path.read_text())


if __name__ == "__main__":
    main()
