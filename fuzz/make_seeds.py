"""Writes the seed corpora of safetensors_fuzz and png_fuzz (fuzz/corpus/safetensors, fuzz/corpus/png).

  .venv/bin/python fuzz/make_seeds.py [models dir]     (default: models/ then ../shared/models)

Seeds: small valid files of the kinds the loader tests write (every dtype and colour type), and
the real model files of the diffusion examples cut down: each safetensors header with its data
cut to 2 KB (invalid: the tensors no longer tile the data), the same header reduced to its
smallest tensors with their real bytes (valid), and a 16x16 crop of the upscaler's PNG fixture.
The output is deterministic; rerun only to change the seeds.
"""
import io
import json
import os
import struct
import sys
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def safetensors(header, data):
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def small_safetensors():
    data = struct.pack("<6f", 1, 2, 3, 4, 5, -6)
    data += struct.pack("<4H", 0x3C00, 0xC000, 0x3800, 0x0000)  # f16: 1, -2, 0.5, 0
    data += struct.pack("<4H", 0x3F80, 0x4040, 0xBF00, 0x4780)  # bf16: 1, 3, -0.5, 65536
    data += struct.pack("<q", 42)
    header = {
        "__metadata__": {"format": "pt", "source": "test"},
        "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "b": {"dtype": "F16", "shape": [4], "data_offsets": [24, 32]},
        "c": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [32, 40]},
        "d": {"dtype": "I64", "shape": [1], "data_offsets": [40, 48]},
    }
    scalar = {"s": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},
              "e": {"dtype": "F16", "shape": [0, 3], "data_offsets": [4, 4]}}
    return {"small": safetensors(header, data), "scalar_empty": safetensors(scalar, struct.pack("<f", 7.5))}


def real_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    cut = raw[: 8 + n + 2048]
    tensors = sorted((k for k in header if k != "__metadata__"),
                     key=lambda k: header[k]["data_offsets"][1] - header[k]["data_offsets"][0])
    reduced, data = {}, b""
    if "__metadata__" in header:
        reduced["__metadata__"] = header["__metadata__"]
    for name in tensors:
        begin, end = header[name]["data_offsets"]
        if len(data) + end - begin > 2048:
            break
        reduced[name] = dict(header[name], data_offsets=[len(data), len(data) + end - begin])
        data += raw[8 + n + begin : 8 + n + end]
    return cut, safetensors(reduced, data)


def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png(width, height, color_type, bit_depth, rows, extra_chunks=(), interlace=0):
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, interlace)
    raw = b"".join(b"\0" + row for row in rows)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
    for kind, body in extra_chunks:
        out += chunk(kind, body)
    return out + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def small_pngs():
    w, h = 4, 3
    px = lambda c: [bytes((x * 40 + y * 7 + k * 90) % 256 for x in range(w) for k in range(c)) for y in range(h)]
    palette = bytes(v for i in range(4) for v in (i * 60, 255 - i * 60, 128))
    seeds = {
        "rgb": png(w, h, 2, 8, px(3)),
        "rgba": png(w, h, 6, 8, px(4)),
        "gray": png(w, h, 0, 8, px(1)),
        "gray_alpha": png(w, h, 4, 8, px(2)),
        "palette_trns": png(w, h, 3, 8, [bytes((x + y) % 4 for x in range(w)) for y in range(h)],
                            [(b"PLTE", palette), (b"tRNS", bytes((255, 0, 128)))]),
        "rgb16": png(2, 2, 2, 16, [bytes(12)] * 2),  # rejected: 16-bit
        "gray1": png(8, 1, 0, 1, [b"\xa5"]),  # rejected: sub-8-bit gray
    }
    # Adam7 interlacing: the passes of an 8x8 RGB image, filter byte 0 on every row of every pass.
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    raw = b""
    for x0, y0, dx, dy in passes:
        for y in range(y0, 8, dy):
            raw += b"\0" + b"".join(bytes(((x * 31 + y * 17 + k) % 256,)) for x in range(x0, 8, dx) for k in range(3))
    ihdr = struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 1)
    seeds["interlaced"] = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9))
                           + chunk(b"IEND", b""))
    return seeds


def fixture_crop(models):
    path = os.path.join(models, "upscaler", "fixture_128.png")
    if not os.path.exists(path):
        return {}
    from PIL import Image

    out = io.BytesIO()
    Image.open(path).convert("RGB").crop((40, 40, 56, 56)).save(out, format="PNG")
    return {"fixture_128_crop16": out.getvalue()}


def write(folder, seeds):
    os.makedirs(folder, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
        print(f"{os.path.relpath(os.path.join(folder, name), ROOT)}: {len(data)} bytes")


def main():
    candidates = sys.argv[1:] or [os.path.join(ROOT, "models"), os.path.join(ROOT, "..", "shared", "models")]
    models = next((c for c in candidates if os.path.isdir(os.path.join(c, "taesd"))), None)
    st = small_safetensors()
    pngs = small_pngs()
    if models is not None:
        for sub, name in (("taesd", "taesana_encoder"), ("taesd", "taef2_decoder"), ("upscaler", "rdn_x2")):
            path = os.path.join(models, sub, name + ".safetensors")
            if os.path.exists(path):
                st[name + "_head"], st[name + "_reduced"] = real_safetensors(path)
        pngs.update(fixture_crop(models))
    write(os.path.join(ROOT, "fuzz", "corpus", "safetensors"), st)
    write(os.path.join(ROOT, "fuzz", "corpus", "png"), pngs)


if __name__ == "__main__":
    main()
