"""Shared by the bench/ scripts: running a Google Benchmark binary for medians, and where results go."""
import datetime
import json
import pathlib
import platform
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run_medians(build, binary, benchmark_filter, repetitions):
    """Runs build/bin/<binary> once; returns ({run_name: median real time}, context, command as shown)."""
    command = [str(ROOT / build / "bin" / binary), f"--benchmark_filter={benchmark_filter}",
               f"--benchmark_repetitions={repetitions}", "--benchmark_report_aggregates_only=true",
               "--benchmark_format=json", "--benchmark_enable_random_interleaving=true"]
    report = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    medians = {row["run_name"]: row["real_time"] for row in report["benchmarks"] if row.get("aggregate_name") == "median"}
    shown = " ".join([f"{build}/bin/{binary}"] + command[1:])
    return medians, report["context"], shown


def result_path(suffix):
    """bench/results/<date>-<host>-<suffix>.md"""
    date = datetime.date.today().isoformat()
    return ROOT / "bench" / "results" / f"{date}-{platform.node() or 'host'}-{suffix}.md", date


def write(path, lines):
    path.write_text("\n".join(lines) + "\n")
    print(path.read_text())
