"""Chart of the figures bench/run_all.sh wrote: LLM tokens/s (ours and the peers, with the decode
bandwidth bound) and conv-net times (our full forward and edit, PyTorch's full forward).

Usage: .venv/bin/python bench/plot.py RESULTS_DIR OUT.png
RESULTS_DIR holds llm.txt (llm_bench's output), convnet.txt (convnet_bench's) and machine.txt.
Bars are the best round (min time); the thin black marks are the median rounds.
"""
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PAIR = r"\s*([\d.]+)\s*/\s*([\d.]+)\s*"
COLORS = {"tessera": "#1f77b4", "llama.cpp": "#ff7f0e", "torch": "#2ca02c", "bound (bandwidth)": "#bbbbbb",
          "tessera full": "#1f77b4", "torch full": "#2ca02c", "tessera edit": "#9467bd"}


def parse_llm(path):
    """{(model, threads): {engine: [(best, median) x 4] or bound}} in file order."""
    figures, model = {}, None
    row = re.compile(r"^\s*(\d+) (\S+)\s*\|" + r"\|".join([PAIR] * 4) + r"\|")
    bound = re.compile(r"^\s*(\d+) bound .*\|\s*([\d.]+) tokens/s")
    for line in open(path):
        if line.startswith("models/") or line.endswith(".gguf\n"):
            model = re.sub(r"(-Instruct)?[.-]([Qq]\d.*)?gguf$", "", os.path.basename(line.split()[0]))
        elif m := row.match(line):
            values = [float(v) for v in m.groups()[2:]]
            figures.setdefault((model, int(m[1])), {})[m[2]] = list(zip(values[::2], values[1::2]))
        elif m := bound.match(line):
            figures.setdefault((model, int(m[1])), {})["bound"] = float(m[2])
    return figures


def parse_convnet(path):
    """[(net, threads, ours full, torch full, ours edit)] with (min, median) ms each."""
    rows = []
    row = re.compile(r"^(\S+)\s+(\d+) \|" + PAIR + r"\|" + PAIR + r"\|" + PAIR + r"\|")
    for line in open(path):
        if m := row.match(line):
            v = [float(x) for x in m.groups()[2:]]
            rows.append((m[1], int(m[2]), (v[0], v[1]), (v[2], v[3]), (v[4], v[5])))
    return rows


def bars(ax, groups, series, ylabel, title, log=False):
    """groups: labels; series: {name: [(best, median) or None per group]}."""
    width = 0.8 / max(1, len(series))
    for k, (name, values) in enumerate(series.items()):
        xs = [g + (k - (len(series) - 1) / 2) * width for g in range(len(groups))]
        best = [v[0] if v else 0 for v in values]
        ax.bar(xs, best, width, label=name, color=COLORS.get(name))
        for x, v in zip(xs, values):
            if v and len(v) > 1:
                ax.plot([x - width / 3, x + width / 3], [v[1], v[1]], color="black", linewidth=1)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=7)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_title(title, fontsize=9)
    if log:
        ax.set_yscale("log")
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=7)


def main():
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    results, out = sys.argv[1:]
    llm = parse_llm(os.path.join(results, "llm.txt"))
    conv = parse_convnet(os.path.join(results, "convnet.txt"))
    machine = open(os.path.join(results, "machine.txt")).read().strip().replace("\n", "; ")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    keys = list(llm)
    groups = [f"{m}\n{t} thr" for m, t in keys]
    engines = [e for e in ("tessera", "llama.cpp", "torch") if any(e in llm[k] for k in keys)]
    for ax, column, title in ((axes[0], 3, "decode at context 1024 (tokens/s)"),
                              (axes[1], 2, "decode at context 128 (tokens/s)")):
        series = {e: [llm[k][e][column] if e in llm[k] else None for k in keys] for e in engines}
        series["bound (bandwidth)"] = [(llm[k]["bound"],) if "bound" in llm[k] else None for k in keys]
        bars(ax, groups, series, "tokens/s", title)
    labels = [f"{net.replace('taef2_', 'taef2 ')}\n{t} thr" for net, t, *_ in conv]
    bars(axes[2], labels, {"tessera full": [r[2] for r in conv], "torch full": [r[3] for r in conv],
                           "tessera edit": [r[4] for r in conv]}, "ms (log)", "conv nets: full forward vs edit",
         log=True)
    fig.suptitle(machine, fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=70)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
