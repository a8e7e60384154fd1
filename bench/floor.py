#!/usr/bin/env python3
"""Issue 18's floor, on a GPU: every CUDA training step of bench_train against what its products and its
optimizer alone must take. The floor of a step is

    the GPU time of its GEMM and convolution kernels (cuBLAS, cuBLASLt, cuDNN), as Nsight Compute times
    them inside the step (kernel durations between the first and the last optimizer update of a window
    of launches, divided by the steps between them: one fused Adam update a step)
  + the optimizer's memory traffic (Adam in f32 reads a parameter, its gradient and two moments and
    writes three of them back: 28 bytes a parameter) at the device's copy bandwidth, measured with a
    device-to-device copy of 1 GiB.

Goal: each step at most 1.3x its floor. The step is the captured step's median over three repetitions,
measured without the profiler.

    python3 bench/floor.py                  # every workload on cuda:0
    python3 bench/floor.py --only convnet   # the workloads whose name has this
"""
import argparse
import datetime
import json
import pathlib
import re
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kernel_profile import kernel_launches  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Kernels of the vendor libraries that do products: cuBLAS/cuBLASLt (gemm, gemv, xmma, cutlass, nvjet, split-K's
# reduction), cuDNN (its engines, implicit-GEMM and FFT convolutions). cuBLAS 13 on Hopper runs most GEMMs as
# nvjet_sm90_* kernels, which the filter missed until 2026-11-27.
PRODUCT = re.compile(r"gemm|gemv|xmma|cutlass|nvjet|splitKreduce|cudnn|fft|wgrad|dgrad|fprop|flip_filter", re.I)
OPTIMIZER = re.compile(r"adam", re.I)
ADAM_BYTES_PER_PARAMETER = 28


def step_times(bench, device, only):
    """{benchmark name: (median ms, parameters)} of the captured steps."""
    command = [str(bench), "--benchmark_format=json", "--benchmark_repetitions=3",
               "--benchmark_report_aggregates_only=true", f"--benchmark_filter=^train_step/[^/]*{only}[^/]*/{device}/"]
    report = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    rows = {}
    for row in report["benchmarks"]:
        if row.get("aggregate_name") == "median":
            rows[row["run_name"]] = (row["real_time"], row.get("parameters", 0.0))
    return rows


def product_ms_per_step(bench, name, launches):
    """(ms of product kernels per step, whole steps profiled) from ncu over `launches` launches: the
    product kernels between the window's first and last optimizer update, over the steps between them."""
    benchmark = re.escape(name.rsplit("/real_time", 1)[0])
    # Nsight Compute locks the clocks at base and flushes the caches before each kernel unless told not
    # to: the products would then be timed slower than the unprofiled step runs them (the ConvNet b64's
    # came out above its whole step on an H200).
    command = ["ncu", "--clock-control", "none", "--cache-control", "none", "--metrics", "gpu__time_duration.sum",
               "--csv", "--launch-skip", "300", "--launch-count", str(launches), str(bench),
               f"--benchmark_filter=^{benchmark}/", "--benchmark_min_time=400x"]
    order = kernel_launches(subprocess.run(command, capture_output=True, text=True).stdout)
    updates = [i for i, (kernel, _) in enumerate(order) if OPTIMIZER.search(kernel)]
    if len(updates) < 2:
        # A step of more kernels than the window holds (the recurrent steps: a few per position): a window
        # four times as long, up to 32000 launches.
        return product_ms_per_step(bench, name, launches * 4) if launches < 8000 else (float("nan"), 0)
    steps = len(updates) - 1
    products = sum(ms for kernel, ms in order[updates[0]:updates[-1]] if PRODUCT.search(kernel))
    return products / steps, steps


def copy_bandwidth_bytes_per_ms():
    """Device-to-device copy bandwidth (bytes read plus written per ms), through PyTorch."""
    import torch
    source = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    for _ in range(3):
        target.copy_(source)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        target.copy_(source)
    end.record()
    torch.cuda.synchronize()
    return 2 * 10 * source.numel() / start.elapsed_time(end)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--only", default="")
    parser.add_argument("--launches", type=int, default=2000, help="kernel launches each profile times")
    args = parser.parse_args()
    bench = ROOT / args.build / "bin" / "bench_train"
    bandwidth = copy_bandwidth_bytes_per_ms()
    command = "python3 bench/floor.py" + (f" --only {args.only}" if args.only else "")
    print(f"{datetime.date.today()}: floors of the CUDA steps on {args.device}; copy bandwidth "
          f"{bandwidth / 1e6:.0f} GB/s (read + write); `{command}`\n")  # bytes per ms / 1e6 = GB/s
    print("| step | ms | products ms | optimizer ms | floor ms | step / floor | steps profiled |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, (ms, parameters) in step_times(bench, args.device, args.only).items():
        products, steps = product_ms_per_step(bench, name, args.launches)
        optimizer = parameters * ADAM_BYTES_PER_PARAMETER / bandwidth
        floor = products + optimizer
        step = name.split("/", 1)[1].rsplit("/real_time", 1)[0]
        print(f"| {step} | {ms:.3f} | {products:.3f} | {optimizer:.3f} | {floor:.3f} | {ms / floor:.2f} | {steps} |",
              flush=True)


if __name__ == "__main__":
    main()
