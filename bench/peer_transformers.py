"""Peer figures for bench/llm_bench.cc: the same measurements with PyTorch + Hugging Face
transformers loading the same GGUF files (weights dequantised to float32 at load, so every
decoded token reads 4 bytes per weight: a float32 engine, not a quantised one).

Prefill of 128 and of 512 tokens (each from an empty cache), greedy decode at context 128 and at
context 1024 with the KV cache (use_cache=True), torch.inference_mode(), the default (SDPA)
attention.
    .venv/bin/python bench/peer_transformers.py [--threads N] [--steps S] [--serve] MODEL.gguf
--threads N  torch.set_num_threads(N) (default 2)
--steps S    decode steps averaged per context (default 16)
--serve      load once, then measure once per line read on stdin and print one line
             "prefill128 prefill512 decode128 decode1024" in seconds (per prefill, per token for
             decode): how llm_bench runs it, alternating rounds with its own
"""
import argparse
import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

TEXT = "The quick brown fox jumps over the lazy dog while the engine keeps what it computed. "


def forward(model, ids, past):
    out = model(input_ids=torch.tensor([ids], dtype=torch.long), past_key_values=past, use_cache=True)
    return out.logits[0, -1], out.past_key_values


def prefill(model, ids):
    start = time.perf_counter()
    logits, past = forward(model, ids, None)
    return time.perf_counter() - start, logits, past


def decode(model, logits, past, steps):
    total = 0.0
    for _ in range(steps):
        next_id = int(logits.argmax())
        start = time.perf_counter()
        logits, past = forward(model, [next_id], past)
        total += time.perf_counter() - start
    return total / steps


def measure(model, corpus, steps):
    p128, logits, past = prefill(model, corpus[:128])
    d128 = decode(model, logits, past, steps)
    p512, logits, past = prefill(model, corpus[:512])
    logits, past = forward(model, corpus[512:1024], past)
    d1024 = decode(model, logits, past, steps)
    return p128, p512, d128, d1024


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("model")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    folder, name = os.path.split(os.path.abspath(args.model))
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    corpus = tokenizer(TEXT * 120)["input_ids"][:1024]
    with torch.inference_mode():
        measure(model, corpus, 2)  # warm-up
        if args.serve:
            print("ready", flush=True)
            for _ in sys.stdin:
                print(" ".join(f"{t:.9f}" for t in measure(model, corpus, args.steps)), flush=True)
            return 0
        p128, p512, d128, d1024 = measure(model, corpus, args.steps)
    print(f"{args.model} (transformers, float32, {args.threads} threads)")
    print(f"  prefill 128 tokens:        {128 / p128:8.1f} tokens/s  ({p128:.3f} s)")
    print(f"  prefill 512 tokens:        {512 / p512:8.1f} tokens/s  ({p512:.3f} s)")
    print(f"  decode at context 128:     {1 / d128:8.1f} tokens/s  ({d128 * 1e3:.2f} ms/token)")
    print(f"  decode at context 1024:    {1 / d1024:8.1f} tokens/s  ({d1024 * 1e3:.2f} ms/token)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
