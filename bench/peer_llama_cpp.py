"""Peer figures for bench/llm_bench.cc: the same measurements with llama.cpp (llama-cpp-python).

Prefill of 128 tokens, decode at context 128 and at context 1024, 2 threads, for each GGUF
model given. Run with a Python that has llama-cpp-python installed, e.g.
    .venv/bin/python bench/peer_llama_cpp.py models/SmolLM2-135M-Instruct.Q4_1.gguf ...
"""
import sys
import time

import llama_cpp
import numpy as np
from llama_cpp import Llama


def last_logits(llm):
    ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),))


def decode(llm, ids, steps):
    total = 0.0
    for _ in range(steps):
        next_id = int(last_logits(llm).argmax())
        start = time.perf_counter()
        llm.eval([next_id])
        total += time.perf_counter() - start
        ids.append(next_id)
    return total / steps


def main():
    for path in sys.argv[1:]:
        llm = Llama(model_path=path, n_ctx=2048, n_threads=2, n_batch=512, logits_all=False, verbose=False)
        text = "The quick brown fox jumps over the lazy dog while the engine keeps what it computed. " * 120
        corpus = llm.tokenize(text.encode(), add_bos=True)[:1024]
        llm.reset()
        start = time.perf_counter()
        llm.eval(corpus[:128])
        prefill = time.perf_counter() - start
        ids = list(corpus[:128])
        d128 = decode(llm, ids, 16)
        llm.reset()
        llm.eval(corpus[:128])
        start = time.perf_counter()
        llm.eval(corpus[128:1024])
        prefill_896 = time.perf_counter() - start
        ids = list(corpus[:1024])
        d1024 = decode(llm, ids, 16)
        print(f"{path} (llama.cpp via llama-cpp-python, 2 threads)")
        print(f"  prefill 128 tokens:        {128 / prefill:8.1f} tokens/s  ({prefill:.3f} s)")
        print(f"  decode at context 128:     {1 / d128:8.1f} tokens/s  ({d128 * 1e3:.2f} ms/token)")
        print(f"  prefill 128 -> 1024:       {896 / prefill_896:8.1f} tokens/s  ({prefill_896:.3f} s)")
        print(f"  decode at context 1024:    {1 / d1024:8.1f} tokens/s  ({d1024 * 1e3:.2f} ms/token)")


if __name__ == "__main__":
    main()
