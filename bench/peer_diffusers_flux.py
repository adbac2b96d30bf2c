#!/usr/bin/env python3
"""Times diffusers' Flux2Transformer2DModel (float32, CPU, no grad) with the config of Tessera's
FLUX.2-style transformer (loaders/flux.h FluxConfig defaults) over the same token counts: the peer
of bench/flux_bench.cc, which runs it alternately with its own rounds.

  .venv/bin/python bench/peer_diffusers_flux.py --latent H W --text L --layers D S --threads T --repeats R

Prints one line: "peer_ms <min> <median>" (milliseconds per forward, after one warm-up).
"""
import argparse
import statistics
import time



def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--latent', type=int, nargs=2, default=(32, 32))
    p.add_argument('--text', type=int, default=32)
    p.add_argument('--layers', type=int, nargs=2, default=(1, 2))
    p.add_argument('--threads', type=int, default=1)
    p.add_argument('--repeats', type=int, default=3)
    a = p.parse_args()
    # Imported after the arguments, so that --help answers without the peer installed.
    import torch
    from diffusers.models.transformers.transformer_flux2 import Flux2Transformer2DModel
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Flux2Transformer2DModel(patch_size=1, in_channels=128, num_layers=a.layers[0],
                                    num_single_layers=a.layers[1], attention_head_dim=32, num_attention_heads=2,
                                    joint_attention_dim=576, timestep_guidance_channels=256, mlp_ratio=3.0,
                                    axes_dims_rope=(8, 8, 8, 8), rope_theta=2000, eps=1e-6,
                                    guidance_embeds=False).eval()
    h, w = a.latent
    tokens = (h // 2) * (w // 2)
    img = torch.randn(1, tokens, 128)
    txt = torch.randn(1, a.text, 576)
    img_ids = torch.zeros(tokens, 4, dtype=torch.long)
    img_ids[:, 1] = torch.arange(tokens) // (w // 2)
    img_ids[:, 2] = torch.arange(tokens) % (w // 2)
    txt_ids = torch.zeros(a.text, 4, dtype=torch.long)
    txt_ids[:, 3] = torch.arange(a.text)
    t = torch.tensor([0.5])
    times = []
    with torch.no_grad():
        for r in range(a.repeats + 1):
            start = time.perf_counter()
            model(hidden_states=img, encoder_hidden_states=txt, timestep=t, img_ids=img_ids, txt_ids=txt_ids)
            if r > 0:
                times.append((time.perf_counter() - start) * 1e3)
    print(f"peer_ms {min(times):.3f} {statistics.median(times):.3f}")


if __name__ == '__main__':
    main()
