"""Peer figures for bench/convnet_bench.cc: the same whole conv nets run by PyTorch on the CPU.

Usage:
    .venv/bin/python bench/peer_torch_convnets.py --threads N --reps R --nets LIST [--models DIR]
LIST is a ','-separated list of taef2_encoder, taef2_decoder, rdn_x2. The nets are the module code
of scripts/reference_conv_nets.py (the goldens' float64 PyTorch implementation) run here in
float32 under torch.inference_mode(), with torch.set_num_threads(N), on the input shapes
convnet_bench uses (128x160 images, a 16x20 latent, a 200x240 image). Prints one line per net:
"index seconds seconds ..." (R timed full forwards after one warm-up run), nothing else on stdout.
"""
import argparse
import os
import sys
import time

import torch
from safetensors.torch import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import reference_conv_nets as nets  # noqa: E402

SHAPES = {
    # name: (file, function, input shape, input scale)
    "taef2_encoder": ("taesd/taef2_encoder.safetensors", nets.taef2_encoder, (1, 3, 128, 160), 1.0),
    "taef2_decoder": ("taesd/taef2_decoder.safetensors", nets.taef2_decoder, (1, 32, 16, 20), 3.0),
    "rdn_x2": ("upscaler/rdn_x2.safetensors", nets.rdn_x2, (1, 3, 200, 240), 255.0),
}


def float32_weights(path):
    """The file's tensors as contiguous float32; Keras HWIO kernels are stored so that the
    reference code's permute to OIHW yields a contiguous tensor (no per-call copy)."""
    weights = {}
    for name, tensor in load_file(path).items():
        tensor = tensor.to(torch.float32)
        if name.endswith("/kernel") and tensor.dim() == 4:
            tensor = tensor.permute(3, 2, 0, 1).contiguous().permute(2, 3, 1, 0)
        weights[name] = tensor
    return weights


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--nets", default=",".join(SHAPES))
    parser.add_argument("--models", default=os.path.join(ROOT, "..", "shared", "models"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with torch.inference_mode():
        for index, name in enumerate(args.nets.split(",")):
            file, net, shape, scale = SHAPES[name]
            w = float32_weights(os.path.join(args.models, file))
            x = torch.rand(shape) * scale
            net(w, x)  # warm-up
            times = []
            for _ in range(args.reps):
                start = time.perf_counter()
                net(w, x)
                times.append(time.perf_counter() - start)
            print(index, " ".join(f"{t:.9f}" for t in times), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
