#!/usr/bin/env python3
"""Writes PyTorch reference ("golden") outputs of the real convolutional networks, for Tessera's
C++ tests in tests/models/ to compare against:

  tests/models/golden/<net>_input.npy    the input (seeded, stored so that C++ needs no RNG twin)
  tests/models/golden/<net>_output.npy   the network's output on it

for <net> in taef2_encoder, taef2_decoder, taesana_encoder, rdn_x2. The networks are written here
from their descriptions in ../shared/models/taesd/README.md and ../shared/models/upscaler/README.md
(the same architectures loaders/taesd.cc and loaders/rdn.cc build), loaded from the same
safetensors files. They run in float64 on the CPU (the F16 weights converted exactly), so the
goldens carry no float32 rounding of their own; the script also runs them in float32 and prints
how far PyTorch's own float32 result is from the float64 one, for scale.

It also checks the upscaler on its own fixture: fixture_128.png (RGB) upscaled x2, rounded and
clipped, against fixture_128_x2_expected.png (prints the largest per-pixel difference).

Usage (CPU, a few seconds; needs torch, numpy, safetensors, pillow):
  .venv/bin/python scripts/reference_conv_nets.py [--models DIR] [--out DIR] [--check-fixture]
  --help prints this text.
"""
import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = 1234


# ---- TAESD family (taesd/README.md) --------------------------------------------------------------
def conv(w, x, prefix, stride=1):
    """3x3 (or 1x1) convolution with 'same' zero padding; bias when the file has one."""
    weight = w[prefix + 'weight']
    bias = w.get(prefix + 'bias')
    return F.conv2d(x, weight, bias, stride=stride, padding=weight.shape[-1] // 2)


def block(w, x, prefix, midblock):
    if midblock:
        p = F.conv2d(x, w[prefix + 'pool.0.weight'])
        p = F.group_norm(p, 4, w[prefix + 'pool.1.weight'], w[prefix + 'pool.1.bias'], eps=1e-5)
        x = x + F.conv2d(F.relu(p), w[prefix + 'pool.3.weight'])
    h = F.relu(conv(w, x, prefix + 'conv.0.'))
    h = F.relu(conv(w, h, prefix + 'conv.2.'))
    h = conv(w, h, prefix + 'conv.4.')
    return F.relu(h + x)  # skip is the identity: every block here is 64 -> 64


def taef2_encoder(w, x):
    x = conv(w, x, '0.')
    x = block(w, x, '1.', False)
    index = 2
    for stage in range(3):
        x = conv(w, x, f'{index}.', stride=2)
        for b in range(3):
            x = block(w, x, f'{index + 1 + b}.', midblock=stage == 2)
        index += 4
    return conv(w, x, f'{index}.')


def taef2_decoder(w, x):
    x = torch.tanh(x / 3) * 3
    x = F.relu(conv(w, x, '1.'))
    for i in (3, 4, 5):
        x = block(w, x, f'{i}.', True)
    index = 6
    for blocks in (3, 3, 1):
        x = F.interpolate(x, scale_factor=2, mode='nearest')
        x = conv(w, x, f'{index + 1}.')
        for b in range(blocks):
            x = block(w, x, f'{index + 2 + b}.', False)
        index += 2 + blocks
    return conv(w, x, f'{index}.')


def taesana_encoder(w, x):
    x = F.relu(conv(w, x, '0.', stride=2))
    x = F.relu(conv(w, x, '2.', stride=2))
    x = block(w, x, '4.', False)
    index = 5
    for _ in range(3):
        x = conv(w, x, f'{index}.', stride=2)
        for b in range(3):
            x = block(w, x, f'{index + 1 + b}.', False)
        index += 4
    return conv(w, x, f'{index}.')


# ---- RDN x2 (upscaler/README.md) -----------------------------------------------------------------
def kconv(w, x, name):
    """Keras conv: HWIO kernel -> OIHW, stride 1, 'same' zero padding, bias."""
    kernel = w[name + '/kernel'].permute(3, 2, 0, 1)
    return F.conv2d(x, kernel, w[name + '/bias'], padding=kernel.shape[-1] // 2)


def rdn_x2(w, x):
    fm1 = kconv(w, x, 'F_m1')
    f0 = kconv(w, fm1, 'F_0')
    l1 = kconv(w, torch.cat([f0, F.relu(kconv(w, f0, 'F_1_1'))], 1), 'LFF_1') + f0
    l2 = kconv(w, torch.cat([l1, F.relu(kconv(w, l1, 'F_2_1'))], 1), 'LFF_2') + l1
    fdf = kconv(w, kconv(w, torch.cat([l1, l2], 1), 'GFF_1'), 'GFF_2') + fm1
    u = kconv(w, F.relu(kconv(w, F.relu(kconv(w, fdf, 'UPN1')), 'UPN2')), 'UPN3')
    u = F.interpolate(u, scale_factor=2, mode='nearest')
    return kconv(w, u, 'SR')


NETS = {
    # name: (file, function, input shape, input kind)
    'taef2_encoder': ('taesd/taef2_encoder.safetensors', taef2_encoder, (1, 3, 32, 40), 'image'),
    'taef2_decoder': ('taesd/taef2_decoder.safetensors', taef2_decoder, (1, 32, 4, 5), 'latent'),
    'taesana_encoder': ('taesd/taesana_encoder.safetensors', taesana_encoder, (1, 3, 64, 64), 'image'),
    'rdn_x2': ('upscaler/rdn_x2.safetensors', rdn_x2, (1, 3, 24, 32), 'pixels'),
}


def make_input(name, shape, kind):
    rng = np.random.default_rng(SEED + sorted(NETS).index(name))
    if kind == 'image':  # [0, 1] as the TAESD encoders take
        return rng.random(shape, dtype=np.float32)
    if kind == 'latent':  # raw latents, roughly unit scale
        return (rng.standard_normal(shape) * 1.5).astype(np.float32)
    return (rng.random(shape, dtype=np.float32) * 255).astype(np.float32)  # [0, 255] pixels


def weights(path, dtype):
    return {k: v.to(dtype) for k, v in load_file(path).items()}


def check_fixture(models):
    from PIL import Image
    up = os.path.join(models, 'upscaler')
    image = np.asarray(Image.open(os.path.join(up, 'fixture_128.png')).convert('RGB'), dtype=np.float32)
    expected = np.asarray(Image.open(os.path.join(up, 'fixture_128_x2_expected.png')).convert('RGB'))
    x = torch.from_numpy(image).permute(2, 0, 1)[None].to(torch.float64)
    with torch.no_grad():
        y = rdn_x2(weights(os.path.join(up, 'rdn_x2.safetensors'), torch.float64), x)
    out = y[0].permute(1, 2, 0).clamp(0, 255).round().to(torch.uint8).numpy()
    diff = np.abs(out.astype(np.int32) - expected.astype(np.int32))
    print(f'fixture: max |ours - expected| = {diff.max()} levels, {np.count_nonzero(diff)} of {diff.size} differ')
    return diff.max()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--models', default=os.path.join(ROOT, '..', 'shared', 'models'))
    parser.add_argument('--out', default=os.path.join(ROOT, 'tests', 'models', 'golden'))
    parser.add_argument('--check-fixture', action='store_true', help='only run the upscaler fixture check')
    args = parser.parse_args()
    torch.manual_seed(SEED)
    if args.check_fixture:
        sys.exit(0 if check_fixture(args.models) <= 1 else 1)
    os.makedirs(args.out, exist_ok=True)
    for name, (file, net, shape, kind) in NETS.items():
        path = os.path.join(args.models, file)
        x = make_input(name, shape, kind)
        with torch.no_grad():
            y64 = net(weights(path, torch.float64), torch.from_numpy(x).to(torch.float64)).numpy()
            y32 = net(weights(path, torch.float32), torch.from_numpy(x)).numpy()
        err = np.abs(y32 - y64).max()
        print(f'{name}: input {list(shape)} -> output {list(y64.shape)}, max |y| = {np.abs(y64).max():.4g}, '
              f'PyTorch float32 vs float64: max abs {err:.3g}, relative to max |y| {err / np.abs(y64).max():.3g}')
        np.save(os.path.join(args.out, f'{name}_input.npy'), x)
        np.save(os.path.join(args.out, f'{name}_output.npy'), y64.astype(np.float32))
    check_fixture(args.models)


if __name__ == '__main__':
    main()
