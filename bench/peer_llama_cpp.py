"""Peer figures for bench/llm_bench.cc: the same measurements with llama.cpp (llama-cpp-python).

Prefill of 128 and of 512 tokens (each from an empty context), greedy decode at context 128 and
at context 1024, for each GGUF model given. Run with a Python that has llama-cpp-python
installed, e.g.
    .venv/bin/python bench/peer_llama_cpp.py [--threads N] [--steps S] [--raw] models/*.gguf
--threads N  llama.cpp threads for both decode and batches (default 2)
--steps S    decode steps averaged per context (default 16)
--kv q8_0    keep the K/V cache in q8_0 (with flash attention, which a quantised V needs); the
             default is llama.cpp's, f16
--serve      (one model) load once, then measure once per line read on stdin and print one line
             "prefill128 prefill512 decode128 decode1024" in seconds (per prefill, per token for
             decode): how llm_bench runs it, alternating rounds with its own
"""
import argparse
import sys
import time

import llama_cpp
import numpy as np
from llama_cpp import Llama

TEXT = "The quick brown fox jumps over the lazy dog while the engine keeps what it computed. "


def last_logits(llm):
    ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),))


def decode(llm, steps):
    total = 0.0
    for _ in range(steps):
        next_id = int(last_logits(llm).argmax())
        start = time.perf_counter()
        llm.eval([next_id])
        total += time.perf_counter() - start
    return total / steps


def prefill(llm, ids):
    llm.reset()
    start = time.perf_counter()
    llm.eval(ids)
    return time.perf_counter() - start


def load(path, threads, kv=None):
    cache = {}
    if kv == "q8_0":
        cache = dict(type_k=llama_cpp.GGML_TYPE_Q8_0, type_v=llama_cpp.GGML_TYPE_Q8_0, flash_attn=True)
    llm = Llama(model_path=path, n_ctx=1280, n_threads=threads, n_threads_batch=threads, n_batch=512,
                n_ubatch=512, logits_all=False, verbose=False, **cache)
    corpus = llm.tokenize((TEXT * 120).encode(), add_bos=True)[:1024]
    measure(llm, corpus, 2)  # warm-up
    return llm, corpus


def measure(llm, corpus, steps):
    p128 = prefill(llm, corpus[:128])
    d128 = decode(llm, steps)
    p512 = prefill(llm, corpus[:512])
    llm.eval(corpus[512:1024])
    d1024 = decode(llm, steps)
    return p128, p512, d128, d1024


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("--kv", choices=["f16", "q8_0"], default="f16")
    parser.add_argument("models", nargs="+")
    args = parser.parse_args()
    if args.serve:
        llm, corpus = load(args.models[0], args.threads, args.kv)
        print("ready", flush=True)
        for _ in sys.stdin:
            print(" ".join(f"{t:.9f}" for t in measure(llm, corpus, args.steps)), flush=True)
        return 0
    for path in args.models:
        p128, p512, d128, d1024 = measure(*load(path, args.threads, args.kv), args.steps)
        print(f"{path} (llama.cpp {llama_cpp.__version__} via llama-cpp-python, {args.threads} threads, {args.kv} K/V)")
        print(f"  prefill 128 tokens:        {128 / p128:8.1f} tokens/s  ({p128:.3f} s)")
        print(f"  prefill 512 tokens:        {512 / p512:8.1f} tokens/s  ({p512:.3f} s)")
        print(f"  decode at context 128:     {1 / d128:8.1f} tokens/s  ({d128 * 1e3:.2f} ms/token)")
        print(f"  decode at context 1024:    {1 / d1024:8.1f} tokens/s  ({d1024 * 1e3:.2f} ms/token)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
