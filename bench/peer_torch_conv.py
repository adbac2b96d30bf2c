"""Peer figures for bench/conv_bench.cc: the same conv2d layer shapes run by PyTorch on the CPU.

Usage:
    .venv/bin/python bench/peer_torch_conv.py --threads N --reps R --shapes SPEC [--cpu-time]
SPEC is a ';'-separated list of "C,O,H,W,K,S,P" (input channels, output channels, input height
and width, square kernel, stride, padding; N = 1, with bias). Prints one line per shape:
"index seconds seconds ..." (R timed runs after one warm-up run), nothing else on stdout.
--cpu-time times by the process's CPU time instead of wall time (a busy machine, 1 thread).
"""
import argparse
import sys
import time

import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--shapes", required=True)
    parser.add_argument("--cpu-time", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.cpu_time else time.perf_counter
    torch.manual_seed(0)
    with torch.inference_mode():
        for index, spec in enumerate(args.shapes.split(";")):
            c, o, h, w, k, s, p = (int(v) for v in spec.split(","))
            x = torch.randn(1, c, h, w)
            conv = torch.nn.Conv2d(c, o, k, stride=s, padding=p, bias=True)
            conv(x)  # warm-up
            times = []
            for _ in range(args.reps):
                start = clock()
                conv(x)
                times.append(clock() - start)
            print(index, " ".join(f"{t:.9f}" for t in times), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
