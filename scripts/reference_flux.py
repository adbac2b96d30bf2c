#!/usr/bin/env python3
"""Writes PyTorch reference ("golden") outputs of the FLUX.2-style transformer (loaders/flux.h)
for tests/models/flux_test.cc, using diffusers' own Flux2Transformer2DModel and Flux2Pipeline
helpers on the weights Tessera's C++ generator makes:

  1. runs `flux_bench --write-weights TMP --layers 2 2 --seed 1` (the C++ seeded generator,
     flux_random_weights) and loads that safetensors file into a Flux2Transformer2DModel of the
     same config (strict: every name and shape must match);
  2. draws a latent [32, 8, 10] and text embeddings [7, 576] (numpy, seeded), packs the latent and
     builds the position ids with Flux2Pipeline's static helpers (_patchify_latents,
     _pack_latents, _prepare_latent_ids, _prepare_text_ids);
  3. runs the model in float64 on the CPU at timestep 0.7 (diffusers computes the sinusoidal
     timestep embedding and the RoPE rotation in float32 whatever the model dtype) and, for
     scale, in float32, printing how far float32 is from float64;
  4. writes tests/models/golden/flux_*.npy (float32; see tests/models/golden/README.md).

Usage (CPU, a few seconds; needs torch, numpy, safetensors, diffusers and a built flux_bench):
  .venv/bin/python scripts/reference_flux.py [--bench build/flux_bench] [--out DIR]
  --help prints this text.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = 1234          # of the inputs
WEIGHT_SEED = 1      # FluxConfig::seed
DOUBLE_LAYERS, SINGLE_LAYERS = 2, 2
LATENT = (32, 8, 10)  # [C, H, W] -> (H/2) * (W/2) = 20 image tokens of 128 channels
TEXT_TOKENS = 7
TIMESTEP = 0.7
# FluxConfig's defaults (loaders/flux.h).
CONFIG = dict(patch_size=1, in_channels=128, num_layers=DOUBLE_LAYERS,
              num_single_layers=SINGLE_LAYERS,
              attention_head_dim=32, num_attention_heads=2, joint_attention_dim=576,
              timestep_guidance_channels=256, mlp_ratio=3.0, axes_dims_rope=(8, 8, 8, 8),
              rope_theta=2000, eps=1e-6, guidance_embeds=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--bench', default=os.path.join(ROOT, 'build', 'flux_bench'))
    parser.add_argument('--out', default=os.path.join(ROOT, 'tests', 'models', 'golden'))
    args = parser.parse_args()

    from diffusers import Flux2Transformer2DModel
    from diffusers.utils import logging as diffusers_logging
    from diffusers.pipelines.flux2.pipeline_flux2 import Flux2Pipeline
    diffusers_logging.set_verbosity_error()  # quiet the dtype-cast notice of model.to()

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'flux.safetensors')
        subprocess.run([args.bench, '--write-weights', path, '--layers', str(DOUBLE_LAYERS),
                        str(SINGLE_LAYERS), '--seed', str(WEIGHT_SEED)],
                       check=True, stdout=subprocess.DEVNULL)
        state = load_file(path)
    model = Flux2Transformer2DModel(**CONFIG)
    model.load_state_dict(state, strict=True)
    model.eval()
    # In state-dict order; the C++ test compares it with the generator's tensors in its order.
    names = list(model.state_dict().keys())
    fingerprint = np.array([[state[n].double().sum().item(), (state[n].double() ** 2).sum().item()]
                            for n in names])

    rng = np.random.default_rng(SEED)
    latent = rng.standard_normal(LATENT).astype(np.float32)
    txt = rng.standard_normal((TEXT_TOKENS, CONFIG['joint_attention_dim'])).astype(np.float32)
    patches = Flux2Pipeline._patchify_latents(torch.from_numpy(latent)[None])
    packed = Flux2Pipeline._pack_latents(patches)  # [1, tokens, 128]
    img_ids = Flux2Pipeline._prepare_latent_ids(patches)  # [1, tokens, 4]
    txt_ids = Flux2Pipeline._prepare_text_ids(torch.from_numpy(txt)[None])  # [1, 7, 4]

    def run(dtype):
        m = model.to(dtype)
        with torch.no_grad():
            out = m(hidden_states=packed.to(dtype),
                    encoder_hidden_states=torch.from_numpy(txt)[None].to(dtype),
                    timestep=torch.tensor([TIMESTEP], dtype=torch.float32),
                    img_ids=img_ids, txt_ids=txt_ids, return_dict=False)[0]
        return out[0].double().numpy()

    want = run(torch.float64)
    single = run(torch.float32)
    scale = np.abs(want).max()
    error = np.abs(single - want).max()
    print(f'velocity {want.shape}: max |value| {scale:.4g}; PyTorch float32 vs float64: max abs '
          f'{error:.3g}, relative to max |value| {error / scale:.3g}')

    os.makedirs(args.out, exist_ok=True)
    files = {
        'flux_latent.npy': latent,
        'flux_txt.npy': txt,
        'flux_packed.npy': packed[0].numpy(),
        'flux_img_ids.npy': img_ids[0].numpy(),
        'flux_txt_ids.npy': txt_ids[0].numpy(),
        'flux_velocity.npy': want,
        'flux_weights_fingerprint.npy': fingerprint,
    }
    for name, value in files.items():
        np.save(os.path.join(args.out, name), np.ascontiguousarray(value, dtype=np.float32))
        print(f'wrote {name} {tuple(value.shape)}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
