#!/usr/bin/env python3
"""Two builds of Kestrel side by side on the CPU training step: the seeds' MLP step (captured and eager)
against its GEMMs alone, as in cpu_step_overhead.py, with the two builds alternating round by round so
that both see the same minutes of a drifting virtual machine. Use it to show that a change (the build
in --after) does not slow the step down relative to the commit before it (--before, e.g. a
`git worktree` of the previous commit built with `-DKESTREL_WITH_CUDA=OFF -DKESTREL_BUILD_TESTS=OFF` and
`--target bench_train kestrel_cpu`). Writes bench/results/<date>-<host>-cpu-step-ab-<label>.md.

    python3 bench/cpu_step_ab.py --before ../base/build --after build --label sdk --rounds 10
"""
import argparse
import statistics

from benchlib import result_path, run_medians, write

STEP = "train_step/seeds_mlp/cpu:0/b128/real_time"
EAGER = "train_step_eager/seeds_mlp/cpu:0/b128/real_time"
FLOOR = "train_step/seeds_mlp/gemms-only-openblas/b128/real_time"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="build folder of the earlier commit")
    parser.add_argument("--after", required=True, help="build folder of the change")
    parser.add_argument("--label", required=True, help="names the record")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    rows = {"before": [], "after": []}
    shown = ""
    for round_index in range(args.rounds):
        order = ("before", "after") if round_index % 2 == 0 else ("after", "before")
        for name in order:
            medians, context, shown = run_medians(getattr(args, name), "bench_train", "seeds_mlp/(gemms-only|cpu:0)", 3)
            rows[name].append((medians[STEP], medians[EAGER], medians[FLOOR]))
    table = []
    for name in ("before", "after"):
        steps, eagers, floors = zip(*rows[name])
        ratio = statistics.median(s / f for s, f in zip(steps, floors))
        eager_ratio = statistics.median(e / f for e, f in zip(eagers, floors))
        table.append(f"| {name} (`{getattr(args, name)}`) | {statistics.median(steps):.2f} | {statistics.median(eagers):.2f} | "
                     f"{statistics.median(floors):.2f} | {ratio:.3f} | {eager_ratio:.3f} |")
    per_round = [f"{a[0] / b[0]:.3f}" for a, b in zip(rows["after"], rows["before"])]
    path, date = result_path(f"cpu-step-ab-{args.label}")
    write(path, [
        f"# CPU training step, two builds side by side ({args.label})",
        "",
        f"Date: {date}. Machine: {context.get('num_cpus')} CPUs. {args.rounds} rounds, the two builds alternating",
        f"(before first in even rounds); each run is `{shown}` (median of 3 repetitions).",
        f"Command: `python3 bench/cpu_step_ab.py --before {args.before} --after {args.after} --label {args.label} "
        f"--rounds {args.rounds}`.",
        "",
        "The seeds' MLP 1024-2048-512-10, batch 128, Adam, f32: the step as the trainer runs it (captured), every op",
        "launched (eager), and its eight sgemm calls alone in OpenBLAS (the floor).",
        "",
        "| build | captured step (ms, median) | eager step (ms) | GEMMs alone (ms) | captured / GEMMs (median of rounds) | eager / GEMMs |",
        "| --- | --- | --- | --- | --- | --- |",
        *table,
        "",
        f"Captured step after / before, per round: {', '.join(per_round)} "
        f"(median {statistics.median(float(r) for r in per_round):.3f}).",
    ])


if __name__ == "__main__":
    main()
