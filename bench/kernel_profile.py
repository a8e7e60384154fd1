#!/usr/bin/env python3
"""Sums an Nsight Compute CSV (`ncu --metrics gpu__time_duration.sum --csv ...`) by kernel name: where the
GPU time of the profiled launches went, largest first, with each kernel's share and launch count.

    python3 bench/kernel_profile.py ncu.csv [--top 25]
"""
import argparse
import collections
import csv
import io
import re

SCALE = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}


def short_name(name):
    """Template arguments and parameter lists cut, so launches of one kernel add up."""
    name = re.sub(r"\(.*", "", name)
    while re.search(r"<[^<>]*>", name):
        name = re.sub(r"<[^<>]*>", "", name)
    return name.replace("void ", "").strip()[:90]


def kernel_launches(text):
    """[(short kernel name, ms)] in launch order, from the text of an ncu CSV."""
    start = text.find('"ID"')  # ncu prints its own lines and the program's output before the table
    launches = []
    for row in csv.DictReader(io.StringIO(text[start:])):
        if row.get("Metric Name") == "gpu__time_duration.sum":
            ms = float(row["Metric Value"].replace(",", "")) * SCALE.get(row["Metric Unit"], 1e-6)
            launches.append((short_name(row["Kernel Name"]), ms))
    return launches


def kernel_times(text):
    """(ms, launches): two Counters by short kernel name, from the text of an ncu CSV."""
    total_ms, launches = collections.Counter(), collections.Counter()
    for name, ms in kernel_launches(text):
        total_ms[name] += ms
        launches[name] += 1
    return total_ms, launches


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    total_ms, launches = kernel_times(open(args.csv, errors="replace").read())
    whole = sum(total_ms.values())
    print(f"{sum(launches.values())} launches, {whole:.3f} ms of kernel time")
    print("| kernel | launches | ms | share |")
    print("| --- | --- | --- | --- |")
    for name, ms in total_ms.most_common(args.top):
        print(f"| {name} | {launches[name]} | {ms:.3f} | {ms / whole:.1%} |")


if __name__ == "__main__":
    main()
