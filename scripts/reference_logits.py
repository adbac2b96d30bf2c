#!/usr/bin/env python3
"""Writes reference ("golden") outputs of well-known implementations for the two real GGUF models,
for Tessera's C++ LLM tests to compare against:

  tests/llm/golden/<model>_reference.json   prompt token ids, top-10 logits at several positions,
                                            last-position logit statistics, greedy continuations
  tests/llm/golden/<model>_tokenizer.json   tokenizer goldens (~35 strings, with/without special
                                            tokens, decode round trips, chat template)

where <model> is `smollm2-135m-instruct-q4_1` or `gemma-3-270m-q4_k_m`.

Implementation: Hugging Face transformers (PyTorch, CPU, float32, eager attention). For Llama and
Gemma-3 GGUF files transformers takes its "legacy" GGUF path: every tensor is dequantised to
float32 with the `gguf` package (gguf-py, llama.cpp's Python reference: `gguf.quants.dequantize`),
then renamed/re-laid out for the HF module (Llama: q/k rows un-permuted; Gemma-3: 1 subtracted
from every *norm.weight, because llama.cpp's converter stores Gemma's (1 + w) RMSNorm weights as
1 + w). The model then runs as an ordinary float32 nn.Module. The tokenizers are the fast
(`tokenizers`) ones transformers builds from the GGUF's tokenizer.ggml.* metadata.
Both files load with transformers, so no fallback was needed: every golden value comes from
transformers; the JSON files record `implementation` and the package versions actually used.
With --llama-cpp, llama-cpp-python (llama.cpp's own quantised kernels and tokenizer) is run on the
same ids and its agreement is stored under `crosscheck_llama_cpp` (never used as golden values).

Independent cross-checks stored in the tokenizer goldens (they do not change the golden ids):
  * SmolLM2: a `tokenizers` BPE built from the same vocab/merges but with SmolLM2's real
    pre-tokenizer (Digits(individual_digits) + ByteLevel), i.e. llama.cpp's `smollm` pre-type.
  * Gemma-3: Google's `sentencepiece` library, with a BPE ModelProto rebuilt from the GGUF vocab
    (pieces, scores, types; byte fallback; no dummy prefix; whitespace escaped as U+2581).

Gemma-3's GGUF has no tokenizer.chat_template, so the script supplies Google's Gemma 3 template
(GEMMA3_CHAT_TEMPLATE below, the one in google/gemma-3-*'s tokenizer_config.json). SmolLM2's
template comes from the GGUF.

Usage (CPU only, no network needed; ~10 minutes on 2 cores; see tests/llm/golden/README.md):
  python3 -m venv .venv   # if absent
  .venv/bin/pip install torch transformers gguf numpy sentencepiece protobuf
  .venv/bin/pip install llama-cpp-python   # only for --llama-cpp (compiles llama.cpp)
  HF_HUB_OFFLINE=1 .venv/bin/python scripts/reference_logits.py --llama-cpp \
      [--model smollm2|gemma3] [--tokenizer-only]
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import platform
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = ROOT / "models"
OUT_DIR = ROOT / "tests" / "llm" / "golden"

TOPK = 10
N_NEW_TOKENS = 48
DIGITS = 5  # logits are rounded to this many decimals in the JSON

# Google's Gemma 3 chat template (text part), from google/gemma-3-*/tokenizer_config.json.
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\n'}}\n"
    "{%- endif -%}\n"
)

MODELS = {
    "smollm2": {
        "name": "smollm2-135m-instruct-q4_1",
        "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "chat_template": None,  # from the GGUF
    },
    "gemma3": {
        "name": "gemma-3-270m-q4_k_m",
        "file": "gemma-3-270m-q4_k_m.gguf",
        "chat_template": GEMMA3_CHAT_TEMPLATE,
    },
}

CHAT_MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]

QA_PROMPT = "Question: What is the capital of France?\nAnswer:"

PLAIN_PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time, in a small village by the sea, there lived"

LONG_PARAGRAPHS = [
    "The history of computing is a story of people trying to make calculation faster and more reliable. "
    "Early mechanical calculators, such as the machines built by Pascal and Leibniz in the seventeenth "
    "century, could add and multiply numbers with gears and wheels. In the nineteenth century, Charles "
    "Babbage designed the Analytical Engine, a general-purpose machine that was never completed, and Ada "
    "Lovelace wrote what many consider the first program for it. The twentieth century brought electronic "
    "computers built from vacuum tubes, then transistors, and finally integrated circuits containing "
    "billions of components on a single chip.",
    "Rivers shape the land they flow through. Over thousands of years, water carries sand and stones "
    "downstream, carving valleys and building wide plains near the sea. Farmers have always settled along "
    "rivers because the soil there is rich and the water is close at hand. Many of the oldest cities in the "
    "world, from Mesopotamia to Egypt and China, grew up on the banks of great rivers, and trade moved along "
    "them long before roads or railways existed.",
    "A good recipe for bread needs only four ingredients: flour, water, salt and yeast. The baker mixes "
    "them into a dough, kneads it until it becomes smooth and elastic, and then lets it rest so the yeast "
    "can produce gas. After the dough has risen, it is shaped into loaves, allowed to rise a second time, "
    "and baked in a hot oven until the crust turns golden brown and the bottom sounds hollow when tapped.",
    "Astronomers measure distances to nearby stars using parallax, the small shift in a star's apparent "
    "position as the Earth moves around the Sun. For more distant objects they rely on standard candles, "
    "such as Cepheid variable stars and certain supernovae, whose true brightness is known. By comparing "
    "how bright these objects appear with how bright they really are, scientists can estimate how far away "
    "they are and map the structure of the universe.",
    "Learning a new language takes patience and practice. Children often pick up words by listening and "
    "repeating, while adults may prefer grammar books and vocabulary lists. Most teachers agree that "
    "speaking with native speakers, reading simple stories and watching films with subtitles help students "
    "remember new words. Making mistakes is a normal part of the process, and every conversation, however "
    "short, builds confidence for the next one.",
    "The city library opens at nine in the morning and closes at eight in the evening. On weekdays, "
    "students come to study in the quiet reading rooms, and on Saturdays the children's section hosts "
    "story hours and craft workshops. Visitors can borrow books, films and music, use the computers, or "
    "ask the librarians for help finding information about almost any subject. In the end, the most "
    "important thing the library offers is",
]
LONG_PROMPT = LONG_PARAGRAPHS[0] + " " + LONG_PARAGRAPHS[1] + " Taken together, these examples show that"
VERY_LONG_PROMPT = "\n\n".join(LONG_PARAGRAPHS)

TOKENIZER_STRINGS = [
    "Hello world",
    "Hello, world!",
    " Hello world",
    "  leading two spaces",
    "trailing space ",
    "multiple    spaces   between     words",
    "The quick brown fox jumps over the lazy dog.",
    "Numbers: 0 7 42 123 1234 12345 3.14159 -17 1,000,000",
    "Phone 555-0123, year 2024, 10%",
    "line one\nline two\n\nline four",
    "\n\n\n",
    "tab\tseparated\tvalues\t",
    "Mixed\r\nline endings\r",
    "Punctuation!?.,;:'\"()[]{}<>@#$%^&*-_=+/\\|~`",
    "It's, don't, we'll, they're, I'm, you've, he'd",
    "café naïve résumé Zürich São Paulo",
    "Ελληνικά και русский текст",
    "日本語のテキストと中文文本",
    "한국어 텍스트",
    "Emoji: 😀👍🏽🎉 ❤️ 🇫🇷",
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; ++i) { sum += x[i]; }",
    "<html><body><p class=\"x\">Hi</p></body></html>",
    "https://example.com/path?query=1&x=y#frag",
    "UPPER lower MiXeD CaSe",
    "a",
    " ",
    "",
    "\u00a0non-breaking\u00a0space and zero\u200bwidth",
    "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "<start_of_turn>user\nHi!<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text after bos<eos>",
    "<|endoftext|>",
    "<s></s><unk><pad>",
    "What is the capital of France?",
]


def versions() -> dict:
    out = {"python": platform.python_version()}
    for pkg in ["torch", "transformers", "tokenizers", "gguf", "numpy", "sentencepiece", "protobuf"]:
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_info(path: Path) -> dict:
    return {"file": path.name, "size": path.stat().st_size, "sha256": sha256(path)}


def rnd(x: float) -> float:
    return round(float(x), DIGITS)


def load_tokenizer(spec: dict):
    tok = AutoTokenizer.from_pretrained(str(MODELS_DIR), gguf_file=spec["file"])
    if spec["chat_template"] is not None and not getattr(tok, "chat_template", None):
        tok.chat_template = spec["chat_template"]
    return tok


def chat_template_source(tok, spec: dict) -> str:
    return "gguf tokenizer.chat_template" if spec["chat_template"] is None else (
        "supplied by scripts/reference_logits.py (GGUF has none): Google's Gemma 3 template"
    )


def encode_chat(tok, messages) -> tuple[str, list[int]]:
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    # The template writes any BOS itself, so (as apply_chat_template(tokenize=True) does) no special
    # tokens are added when encoding the rendered text.
    ids = tok(text, add_special_tokens=False)["input_ids"]
    return text, list(ids)


def hyperparams(model, tok) -> dict:
    c = model.config
    rope = getattr(c, "rope_parameters", None) or {}
    if "rope_theta" in rope:
        thetas = {"default": rope["rope_theta"]}
    else:
        thetas = {k: v.get("rope_theta") for k, v in rope.items() if isinstance(v, dict)}
    if not thetas and getattr(c, "rope_theta", None) is not None:
        thetas = {"default": c.rope_theta}
    emb = model.get_input_embeddings()
    head = model.get_output_embeddings()
    tied = head.weight.data_ptr() == emb.weight.data_ptr()
    out = {
        "model_type": c.model_type,
        "hf_class": type(model).__name__,
        "n_layers": c.num_hidden_layers,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "n_heads": c.num_attention_heads,
        "n_kv_heads": c.num_key_value_heads,
        "head_dim": getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
        "rope_theta": thetas,
        "rope_type": {k: v.get("rope_type") for k, v in rope.items() if isinstance(v, dict)}
        or rope.get("rope_type"),
        "sliding_window": getattr(c, "sliding_window", None),
        "layer_types": getattr(c, "layer_types", None),
        "vocab_size": c.vocab_size,
        "rms_norm_eps": c.rms_norm_eps,
        "max_position_embeddings": c.max_position_embeddings,
        "hidden_act": getattr(c, "hidden_act", None) or getattr(c, "hidden_activation", None),
        "tie_word_embeddings_config": bool(getattr(c, "tie_word_embeddings", False)),
        "lm_head_shares_embedding_tensor": bool(tied),
        "final_logit_softcapping": getattr(c, "final_logit_softcapping", None),
        "attn_logit_softcapping": getattr(c, "attn_logit_softcapping", None),
        "query_pre_attn_scalar": getattr(c, "query_pre_attn_scalar", None),
        "attention_scale": None,
        "embedding_scale": None,
        "attention_bias": getattr(c, "attention_bias", None),
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
    }
    if c.model_type.startswith("gemma"):
        out["embedding_scale"] = float(model.model.embed_tokens.embed_scale)  # sqrt(hidden), float32
        out["attention_scale"] = float(c.query_pre_attn_scalar) ** -0.5
        out["norm_formula"] = "x * rsqrt(mean(x^2) + eps) * (1 + w); HF w = gguf w - 1"
        out["qk_norm"] = True
        out["sliding_window_rule"] = "query i sees key j iff i - 511 <= j <= i (kv_idx > q_idx - sliding_window)"
    else:
        out["attention_scale"] = out["head_dim"] ** -0.5
        out["embedding_scale"] = 1.0
        out["norm_formula"] = "x * rsqrt(mean(x^2) + eps) * w"
        out["qk_norm"] = False
    return out


def topk(logits_row: torch.Tensor, k: int = TOPK) -> list:
    vals, idx = torch.topk(logits_row, k)
    return [[int(i), rnd(v)] for i, v in zip(idx.tolist(), vals.tolist())]


def row_stats(row: torch.Tensor) -> dict:
    r = row.double()
    return {
        "max": rnd(r.max()),
        "min": rnd(r.min()),
        "mean": rnd(r.mean()),
        "std": rnd(r.std(unbiased=False)),
        "logsumexp": rnd(torch.logsumexp(r, 0)),
        "argmax": int(r.argmax()),
    }


@torch.no_grad()
def run_prompt(model, tok, ids: list[int], positions: list[int]) -> dict:
    x = torch.tensor([ids], dtype=torch.long)
    out = model(input_ids=x, use_cache=True)
    logits = out.logits[0].float()  # [n, vocab]
    n = len(ids)
    res = {
        "n_prompt_tokens": n,
        "top10": [{"pos": p, "top": topk(logits[p]), "stats": row_stats(logits[p])} for p in positions],
        "last_stats": row_stats(logits[n - 1]),
        "argmax_per_position": [int(a) for a in logits.argmax(-1).tolist()],
    }
    # Greedy continuation with the KV cache, argmax only (no sampling, no penalties). EOS does not
    # stop it: exactly N_NEW_TOKENS are generated, the first EOS index is recorded.
    past = out.past_key_values
    next_id = int(logits[n - 1].argmax())
    gen, gaps, top1 = [], [], []
    step_logits = logits[n - 1]
    for step in range(N_NEW_TOKENS):
        v2, _ = torch.topk(step_logits, 2)
        gen.append(next_id)
        top1.append(rnd(v2[0]))
        gaps.append(rnd(v2[0] - v2[1]))
        if step == N_NEW_TOKENS - 1:
            break
        o = model(input_ids=torch.tensor([[next_id]]), past_key_values=past, use_cache=True)
        past = o.past_key_values
        step_logits = o.logits[0, -1].float()
        next_id = int(step_logits.argmax())
    eos_ids = {tok.eos_token_id}
    eot = tok.convert_tokens_to_ids("<end_of_turn>") if "<end_of_turn>" in tok.get_vocab() else None
    if eot is not None:
        eos_ids.add(eot)
    first_stop = next((i for i, t in enumerate(gen) if t in eos_ids), None)
    res["greedy"] = {
        "n_new_tokens": len(gen),
        "token_ids": gen,
        "tokens": tok.convert_ids_to_tokens(gen),
        "text": tok.decode(gen, skip_special_tokens=False),
        "first_stop_index": first_stop,
        "stop_ids": sorted(i for i in eos_ids if i is not None),
        "text_until_stop": tok.decode(gen[:first_stop] if first_stop is not None else gen, skip_special_tokens=False),
        "top1_logit_per_step": top1,
        "top1_top2_gap_per_step": gaps,
        "min_gap": min(gaps),
        "min_gap_step": int(np.argmin(gaps)),
    }
    return res


def positions_for(n: int, extra: list[int] = ()) -> list[int]:
    ps = {0, n // 2, n - 1}
    if n >= 100:
        ps |= {n // 4, (3 * n) // 4}
    ps |= {p for p in extra if 0 <= p < n}
    return sorted(ps)


def reference(key: str, spec: dict) -> dict:
    path = MODELS_DIR / spec["file"]
    tok = load_tokenizer(spec)
    model = AutoModelForCausalLM.from_pretrained(
        str(MODELS_DIR), gguf_file=spec["file"], dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    w = [p for p in model.parameters()]
    assert all(p.dtype == torch.float32 for p in w), "expected plain float32 weights"
    n_params = sum(p.numel() for p in w)

    prompts = []
    chat_text, chat_ids = encode_chat(tok, CHAT_MESSAGES)
    prompts.append({"name": "chat", "kind": "chat template, add_generation_prompt=True",
                    "messages": CHAT_MESSAGES, "text": chat_text, "ids": chat_ids})
    for name, text in [("plain", PLAIN_PROMPT), ("qa", QA_PROMPT), ("long", LONG_PROMPT),
                       ("very_long", VERY_LONG_PROMPT)]:
        ids = list(tok(text)["input_ids"])  # add_special_tokens=True: BOS exactly as the tokenizer adds it
        prompts.append({"name": name, "kind": "plain text, tokenizer(text) with default special tokens",
                        "text": text, "ids": ids})

    results = []
    for p in prompts:
        n = len(p["ids"])
        extra = [510, 511, 512, 513] if n > 512 else []
        print(f"  [{key}] prompt {p['name']}: {n} tokens", flush=True)
        r = run_prompt(model, tok, p["ids"], positions_for(n, extra))
        results.append({**p, **r})
        print(f"    greedy: {r['greedy']['text']!r}", flush=True)

    return {
        "model": spec["name"],
        "gguf": file_info(path),
        "implementation": (
            "Hugging Face transformers AutoModelForCausalLM.from_pretrained(models/, gguf_file=..., "
            "dtype=torch.float32, attn_implementation='eager') on CPU; weights dequantised to float32 by "
            "gguf-py (gguf.quants.dequantize) inside transformers' GGUF loader; tokenizer = "
            "AutoTokenizer.from_pretrained(models/, gguf_file=...)"
        ),
        "versions": versions(),
        "torch_threads": torch.get_num_threads(),
        "n_parameters_in_module": n_params,
        "hyperparameters": hyperparams(model, tok),
        "chat_template_source": chat_template_source(tok, spec),
        "notes": {
            "logits": f"float32 logits rounded to {DIGITS} decimals; top10 = [[token_id, logit], ...] best first; "
                      "stats.std is the population std (ddof=0) over the whole vocab, computed in float64",
            "argmax_per_position": "argmax of the logits at every prompt position (full-prompt forward pass)",
            "greedy": f"{N_NEW_TOKENS} tokens by argmax with the KV cache after the full-prompt pass; EOS does "
                      "not stop generation (first_stop_index marks it). Small top1_top2_gap values mark steps "
                      "where a tiny numerical difference may flip the argmax.",
        },
        "prompts": results,
    }


# ----------------------------------------------------------------------------- tokenizer goldens


def smollm2_crosscheck_tokenizer(tok):
    """Same vocab/merges, SmolLM2's real pre-tokenizer (as in its tokenizer.json / llama.cpp `smollm`)."""
    from tokenizers import Tokenizer, pre_tokenizers

    t = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    t.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True),
         pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)]
    )
    return "tokenizers BPE with pre_tokenizer Digits(individual_digits=True)+ByteLevel(use_regex=True)", \
        (lambda s: t.encode(s, add_special_tokens=False).ids)


def gemma_crosscheck_tokenizer(path: Path):
    """Google's sentencepiece with a BPE ModelProto rebuilt from the GGUF's vocabulary."""
    import sentencepiece as spm
    from gguf import GGUFReader
    from sentencepiece import sentencepiece_model_pb2 as pb

    r = GGUFReader(str(path))
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    scores = r.fields["tokenizer.ggml.scores"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.vocab_size = len(toks)
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.unk_id, m.trainer_spec.bos_id, m.trainer_spec.eos_id, m.trainer_spec.pad_id = 3, 2, 1, 0
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = False
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    for t, s, ty in zip(toks, scores, types):
        p = m.pieces.add()
        # multi-space user-defined tokens are stored with real spaces in the GGUF
        p.piece = "\u2581" * len(t) if (" " in t and not t.strip()) else t
        p.score = float(s)
        p.type = int(ty)
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(m.SerializeToString())
    return ("sentencepiece BPE ModelProto rebuilt from GGUF tokens/scores/types (byte_fallback, no dummy "
            "prefix, identity normalizer); control-token text is not parsed by sentencepiece"), \
        (lambda s: list(sp.EncodeAsIds(s)))


def tokenizer_goldens(key: str, spec: dict) -> dict:
    path = MODELS_DIR / spec["file"]
    tok = load_tokenizer(spec)
    if key == "smollm2":
        cc_desc, cc = smollm2_crosscheck_tokenizer(tok)
    else:
        cc_desc, cc = gemma_crosscheck_tokenizer(path)
    added = tok.get_added_vocab()

    entries = []
    n_agree = n_cmp = 0
    for s in TOKENIZER_STRINGS:
        with_sp = list(tok(s, add_special_tokens=True)["input_ids"])
        without = list(tok(s, add_special_tokens=False)["input_ids"])
        dec = tok.decode(without, skip_special_tokens=False)
        e = {
            "text": s,
            "ids_with_special": with_sp,
            "ids_without_special": without,
            "tokens": tok.convert_ids_to_tokens(without),
            "decoded": dec,
            "roundtrip_ok": dec == s,
            "decoded_with_special_skip": tok.decode(with_sp, skip_special_tokens=True),
        }
        # sentencepiece matches user-defined pieces in raw text but never control ones
        has_control = any(t.special and t.content in s for t in tok.added_tokens_decoder.values())
        if key == "gemma3" and has_control:
            e["crosscheck"] = None  # sentencepiece does not match control-token text
        else:
            other = cc(s)
            e["crosscheck"] = {"ids": other if other != without else "same", "agrees": other == without}
            n_cmp += 1
            n_agree += other == without
        entries.append(e)

    chat_single_text, chat_single_ids = encode_chat(tok, CHAT_MESSAGES)
    multi = [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello. How can I help?"},
        {"role": "user", "content": "Name a colour."},
    ]
    multi_text, multi_ids = encode_chat(tok, multi)
    vocab = tok.get_vocab()

    def tid(t):
        return vocab.get(t)

    special_names = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<start_of_turn>", "<end_of_turn>",
                     "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<start_of_image>", "<end_of_image>",
                     "<image_soft_token>", "\n", "\n\n", "  ", "\u2581\u2581", "\t"]
    return {
        "model": spec["name"],
        "gguf": {"file": path.name},
        "implementation": f"transformers AutoTokenizer.from_pretrained(models/, gguf_file=...) -> {type(tok).__name__} "
                          "(fast tokenizer built from GGUF tokenizer.ggml.* metadata)",
        "versions": versions(),
        "facts": {
            "tokenizer_class": type(tok).__name__,
            "vocab_size_incl_added": len(vocab),
            "bos_token": tok.bos_token, "bos_token_id": tok.bos_token_id,
            "eos_token": tok.eos_token, "eos_token_id": tok.eos_token_id,
            "unk_token": tok.unk_token, "unk_token_id": tok.unk_token_id,
            "pad_token": tok.pad_token, "pad_token_id": tok.pad_token_id,
            "add_bos_token": bool(getattr(tok, "add_bos_token", False)),
            "add_eos_token": bool(getattr(tok, "add_eos_token", False)),
            "adds_bos_on_encode": tok("x")["input_ids"][:1] == [tok.bos_token_id],
            "n_added_tokens": len(added),
            "n_special_added_tokens": sum(1 for t in tok.added_tokens_decoder.values() if t.special),
            "n_nonspecial_added_tokens": sum(1 for t in tok.added_tokens_decoder.values() if not t.special),
            "special_token_ids": {t: tid(t) for t in special_names if tid(t) is not None},
            "chat_template_source": chat_template_source(tok, spec),
            "chat_template": tok.chat_template,
        },
        "chat": {
            "single_turn": {"messages": CHAT_MESSAGES, "add_generation_prompt": True,
                            "text": chat_single_text, "ids": chat_single_ids},
            "multi_turn": {"messages": multi, "add_generation_prompt": True, "text": multi_text, "ids": multi_ids},
        },
        "crosscheck": {"implementation": cc_desc, "compared": n_cmp, "agree": n_agree},
        "strings": entries,
    }


# ----------------------------------------------------------------------------- llama.cpp cross-check


def load_llama_cpp(spec: dict, vocab_only: bool = False):
    from llama_cpp import Llama

    return Llama(model_path=str(MODELS_DIR / spec["file"]), n_ctx=1024, n_batch=1024, n_ubatch=1024,
                 logits_all=True, vocab_only=vocab_only, n_threads=max(1, torch.get_num_threads()),
                 verbose=False)


def llama_cpp_version() -> str | None:
    try:
        return importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        return None


def tokenizer_crosscheck_llama_cpp(spec: dict, golden: dict) -> dict:
    """llama.cpp's own tokenizer (llama_tokenize with add_special=True, parse_special=True)."""
    llm = load_llama_cpp(spec, vocab_only=True)
    rows, agree = [], 0
    for e in golden["strings"]:
        ids = llm.tokenize(e["text"].encode("utf-8"), add_bos=True, special=True)
        ok = list(ids) == e["ids_with_special"]
        agree += ok
        rows.append({"text": e["text"], "agrees": ok, **({} if ok else {"llama_cpp_ids": list(ids)})})
    for name in ["single_turn", "multi_turn"]:
        c = golden["chat"][name]
        ids = llm.tokenize(c["text"].encode("utf-8"), add_bos=False, special=True)
        ok = list(ids) == c["ids"]
        agree += ok
        rows.append({"text": c["text"], "agrees": ok, **({} if ok else {"llama_cpp_ids": list(ids)})})
    return {"implementation": f"llama-cpp-python {llama_cpp_version()} Llama(vocab_only=True).tokenize("
                              "text, add_bos=True, special=True) (chat texts: add_bos=False)",
            "compared": len(rows), "agree": agree, "rows": [r for r in rows if not r["agrees"]]}


def reference_crosscheck_llama_cpp(spec: dict, ref: dict) -> dict:
    """Runs the same prompt ids through llama.cpp (its own quantised kernels) and compares."""
    llm = load_llama_cpp(spec)
    out = []
    for p in ref["prompts"]:
        ids = p["ids"]
        n = len(ids)
        llm.reset()
        llm.eval(ids)
        scores = np.array(llm.scores[:n], dtype=np.float32)
        argmax = scores.argmax(-1)
        pos_rows = []
        for t in p["top10"]:
            row = scores[t["pos"]]
            hf_ids = [i for i, _ in t["top"]]
            hf_vals = np.array([v for _, v in t["top"]])
            lc_top = np.argsort(-row)[:TOPK]
            pos_rows.append({
                "pos": t["pos"],
                "top1_agrees": int(lc_top[0]) == hf_ids[0],
                "top10_overlap": len(set(map(int, lc_top)) & set(hf_ids)),
                "max_abs_diff_on_hf_top10": rnd(np.max(np.abs(row[hf_ids] - hf_vals))),
                "llama_cpp_top": [[int(i), rnd(row[i])] for i in lc_top],
            })
        last = scores[n - 1].astype(np.float64)
        # greedy with llama.cpp, same rules (argmax, EOS does not stop)
        gen = []
        nxt = int(argmax[n - 1])
        for step in range(N_NEW_TOKENS):
            gen.append(nxt)
            if step == N_NEW_TOKENS - 1:
                break
            llm.eval([nxt])
            nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        hf_gen = p["greedy"]["token_ids"]
        common = next((i for i, (a, b) in enumerate(zip(gen, hf_gen)) if a != b), len(gen))
        out.append({
            "name": p["name"],
            "argmax_agreement": rnd(float(np.mean(argmax == np.array(p["argmax_per_position"])))),
            "positions": pos_rows,
            "last_stats": {"max": rnd(last.max()), "mean": rnd(last.mean()), "std": rnd(last.std())},
            "greedy_token_ids": gen,
            "greedy_text": llm.detokenize(gen).decode("utf-8", errors="replace"),
            "greedy_common_prefix_with_hf": common,
        })
        print(f"    llama.cpp {p['name']}: argmax agreement {out[-1]['argmax_agreement']}, "
              f"greedy common prefix {common}/{N_NEW_TOKENS}", flush=True)
    return {"implementation": f"llama-cpp-python {llama_cpp_version()} (bundled llama.cpp, CPU, its quantised "
                              "kernels: weights stay Q4_1/Q4_K/..., activations quantised to Q8 for the dot "
                              "products), Llama(logits_all=True).eval(ids)",
            "prompts": out}


def write_json(obj: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(obj, indent=1, ensure_ascii=False)
    path.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {path.relative_to(ROOT)} ({len(text.encode()) // 1024} KB)", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), action="append")
    ap.add_argument("--tokenizer-only", action="store_true")
    ap.add_argument("--llama-cpp", action="store_true",
                    help="also cross-check against llama-cpp-python (pip install llama-cpp-python)")
    args = ap.parse_args()
    torch.manual_seed(0)
    for key in args.model or sorted(MODELS, reverse=True):
        spec = MODELS[key]
        print(f"== {spec['name']}", flush=True)
        tg = tokenizer_goldens(key, spec)
        if args.llama_cpp:
            tg["crosscheck_llama_cpp"] = tokenizer_crosscheck_llama_cpp(spec, tg)
        write_json(tg, OUT_DIR / f"{spec['name']}_tokenizer.json")
        if not args.tokenizer_only:
            ref = reference(key, spec)
            if args.llama_cpp:
                ref["crosscheck_llama_cpp"] = reference_crosscheck_llama_cpp(spec, ref)
            write_json(ref, OUT_DIR / f"{spec['name']}_reference.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
