"""Data parallelism on the CPU backend, measured side by side on this machine (records a result file).

1. All-reduce: bench_allreduce under mpirun, Kestrel's collective path (ProcessGroup -> plugin ABI ->
   the CPU plugin's MPI thread) against raw in-place MPI_Allreduce of the same sizes. Target: >= 80% of
   MPI's bus bandwidth at 4 MiB.
2. Overlap: `kestrel train` of the seeds' MLP and the ConvNet on 2 ranks, with one gradient bucket (the
   sums start only when backward is over) and with smaller buckets (sums run during backward), in
   interleaved rounds. From each run's summary.json: samples/s, the seconds rank 0 waited after backward
   for sums still in flight, and the seconds from each step's first bucket sent to its last sum done; the
   share of that span spent computing is the communication hidden behind backward.

    python3 bench/data_parallel.py [--ranks 2] [--rounds 3] [--steps 60]

On another backend (--backend vulkan) only the training part runs, and --compare-plugin SO adds a second
plugin build (loaded through KESTREL_PLUGIN_PATH) that alternates with the build's own round by round:
an A/B of a change to the backend's collectives, e.g. Vulkan's synchronous against asynchronous ones.

    python3 bench/data_parallel.py --backend vulkan --only seeds_mlp --caps 1000 1 --steps 30 \
        --compare-plugin /tmp/before/libkestrel_vulkan.so
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

from benchlib import ROOT, result_path, write

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")

# (run config, its bucket caps in MiB: the first gives one bucket, the others several)
WORKLOADS = [
    ("seeds_mlp.train.json", [1000, 25, 4, 1], ["--train-subset", "12800"]),
    ("fashion_convnet.train.json", [1000, 0.1, 0.02], ["--train-subset", "12800", "--test-subset", "500"]),
]


def mpirun(ranks):
    return ["mpirun", "--oversubscribe", "-np", str(ranks)]


def allreduce(build, ranks, rounds):
    command = mpirun(ranks) + [str(ROOT / build / "bin" / "bench_allreduce"), "--rounds", str(rounds * 3)]
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=ENV).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")], " ".join(command[:-3] + [
        f"{build}/bin/bench_allreduce", "--rounds", str(rounds * 3)])


def train(build, ranks, config, cap, steps, extra, out, backend="cpu", plugin=None):
    command = mpirun(ranks) + [str(ROOT / build / "bin" / "kestrel"), "train", str(ROOT / "models" / config),
                               "--max-steps", str(steps), "--bucket-mb", str(cap), "--out", out, "--quiet",
                               "--backend", backend] + extra
    env = dict(ENV, KESTREL_PLUGIN_PATH=plugin) if plugin else ENV
    subprocess.run(command, check=True, capture_output=True, text=True, env=env)
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--only", help="the run configs whose name contains this")
    parser.add_argument("--caps", type=float, nargs="+", help="bucket caps in MiB instead of each config's own")
    parser.add_argument("--compare-plugin", help="another build of the backend's plugin (.so), alternating rounds")
    args = parser.parse_args()
    if args.backend != "cpu" or args.compare_plugin:
        return compare_plugins(args)

    sizes, shown = allreduce(args.build, args.ranks, args.rounds)
    lines = ["# Data parallelism on the CPU backend: all-reduce bandwidth and overlap with backward", "",
             f"Command: `python3 bench/data_parallel.py --ranks {args.ranks} --rounds {args.rounds} "
             f"--steps {args.steps}` (OpenMPI, {args.ranks} ranks on this machine).", "",
             "## All-reduce: Kestrel's path against raw MPI_Allreduce", "",
             f"`{shown}`: in-place f32 sums, alternating rounds, medians; busbw = algbw x 2(N-1)/N.", "",
             "| bytes | MPI_Allreduce busbw (GB/s) | Kestrel busbw (GB/s) | Kestrel / MPI |",
             "| --- | --- | --- | --- |"]
    for row in sizes:
        lines.append(f"| {row['bytes']:,} | {row['mpi_busbw_gbps']:.2f} | {row['kestrel_busbw_gbps']:.2f} | "
                     f"{row['fraction']:.2f} |")

    lines += ["", "## Gradient sums during backward", "",
              f"`kestrel train CONFIG --max-steps {args.steps} --bucket-mb CAP` on {args.ranks} ranks, "
              f"{args.rounds} interleaved rounds, medians of rank 0's figures. wait: seconds per step rank 0 "
              "waited after backward for sums in flight; span: seconds per step from the first bucket sent to "
              "the last sum done; hidden in span = 1 - wait / span; hidden vs one bucket = 1 - wait / (the "
              "one-bucket run's wait), the share of the communication a step waits for when the sums start only "
              "after backward that the buckets hide.", "",
              "| run config | bucket cap (MiB) | samples/s | wait (ms/step) | span (ms/step) | hidden in span | "
              "hidden vs one bucket |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    with tempfile.TemporaryDirectory() as scratch:
        for config, caps, extra in WORKLOADS:
            results = {cap: [] for cap in caps}
            for round_ in range(args.rounds):
                for cap in caps:
                    out = os.path.join(scratch, f"{config}-{cap}-{round_}")
                    results[cap].append(train(args.build, args.ranks, config, cap, args.steps, extra, out))
            one_bucket_wait = None
            for cap in caps:
                runs = results[cap]
                steps = runs[0]["steps"]
                rate = statistics.median(r["samples_per_second"] for r in runs)
                wait = statistics.median(r["gradient_wait_seconds"] for r in runs) / steps * 1e3
                span = statistics.median(r["gradient_sync_seconds"] for r in runs) / steps * 1e3
                hidden = 1 - wait / span if span > 0 else float("nan")
                one_bucket_wait = one_bucket_wait or wait
                versus = "(baseline)" if wait == one_bucket_wait else f"{1 - wait / one_bucket_wait:.2f}"
                lines.append(f"| {config} | {cap:g} | {rate:.0f} | {wait:.2f} | {span:.2f} | {hidden:.2f} | {versus} |")
    path, _ = result_path("data-parallel-cpu")
    write(path, lines)


def compare_plugins(args):
    """Training only, on args.backend: the build's plugin (and args.compare_plugin) round by round."""
    plugins = {"build": None}
    if args.compare_plugin:
        plugins["compared"] = os.path.abspath(args.compare_plugin)
    flags = f"--backend {args.backend} --ranks {args.ranks} --rounds {args.rounds} --steps {args.steps}"
    flags += f" --only {args.only}" if args.only else ""
    flags += " --caps " + " ".join(f"{c:g}" for c in args.caps) if args.caps else ""
    flags += f" --compare-plugin {args.compare_plugin}" if args.compare_plugin else ""
    lines = [f"# Data parallelism on the {args.backend} backend: gradient sums during backward", "",
             f"Command: `python3 bench/data_parallel.py {flags}` (OpenMPI, {args.ranks} ranks on this machine).", "",
             f"`kestrel train CONFIG --backend {args.backend} --max-steps {args.steps} --bucket-mb CAP`; the plugins "
             "alternate round by round (`compared` is loaded through KESTREL_PLUGIN_PATH); medians over "
             f"{args.rounds} rounds of rank 0's figures. wait: seconds per step rank 0 waited after backward for "
             "the sums (on a device, this includes the device finishing backward); span: seconds per step from the "
             "first bucket sent to the last sum done.", "",
             "| run config | plugin | bucket cap (MiB) | samples/s | wait (ms/step) | span (ms/step) |",
             "| --- | --- | --- | --- | --- | --- |"]
    workloads = [w for w in WORKLOADS if not args.only or args.only in w[0]]
    with tempfile.TemporaryDirectory() as scratch:
        for config, caps, extra in workloads:
            caps = args.caps or caps
            results = {(name, cap): [] for name in plugins for cap in caps}
            for round_ in range(args.rounds):
                names = list(plugins) if round_ % 2 == 0 else list(reversed(plugins))
                for name in names:
                    for cap in caps:
                        out = os.path.join(scratch, f"{config}-{name}-{cap}-{round_}")
                        results[(name, cap)].append(train(args.build, args.ranks, config, cap, args.steps, extra, out,
                                                          args.backend, plugins[name]))
            for (name, cap), runs in results.items():
                steps = runs[0]["steps"]
                rate = statistics.median(r["samples_per_second"] for r in runs)
                wait = statistics.median(r["gradient_wait_seconds"] for r in runs) / steps * 1e3
                span = statistics.median(r["gradient_sync_seconds"] for r in runs) / steps * 1e3
                lines.append(f"| {config} | {name} | {cap:g} | {rate:.0f} | {wait:.1f} | {span:.1f} |")
    path, _ = result_path(f"data-parallel-{args.backend}")
    write(path, lines)


if __name__ == "__main__":
    main()
