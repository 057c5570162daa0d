#!/usr/bin/env python3
"""Pivot tables for docs/RESULTS.md from `kvfold eval --out` summaries.

    results_tables.py consistency DIR/summary.csv
    results_tables.py needle DIR/summary.csv

One row per method, one column per budget (methods without a budget, such as
lightkv, fill the budget-1 column and say so); consistency cells are
"ROUGE-L F1 / perplexity of the reference", needle cells "text / image"
accuracy (from `--needle both`). Standard library only.
"""
import csv
import sys

BUDGETS = ["1", "0.5", "0.2", "0.1", "0.05"]


def load(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def methods(rows):
    out = []
    for r in rows:
        if r["kv"] not in out:
            out.append(r["kv"])
    return out


def cell(rows, kv, budget, fmt):
    hits = [r for r in rows if r["kv"] == kv and (r["budget"] == budget or (budget == "1" and r["budget"] == "-"))]
    return fmt(hits) if hits else ""


def mib(h):
    """KV kept, the mean over the runs' samples."""
    return f"{sum(float(r['kv_mib']) * int(r['samples']) for r in h) / sum(int(r['samples']) for r in h):.1f}"


def header(rows):
    full = [r for r in rows if r["kv"] == "full"]
    print("| kv | " + " | ".join(f"budget {b}" for b in BUDGETS) +
          f" | KV MiB kept at 0.05 (full cache: {mib(full)}) |")
    print("|---" * (len(BUDGETS) + 2) + "|")


def name(rows, kv):
    alone = kv != "full" and all(r["budget"] == "-" for r in rows if r["kv"] == kv)
    return f"`{kv}`" + (" (no budget)" if alone else "")


def consistency(rows):
    header(rows)
    for kv in methods(rows):
        cells = [cell(rows, kv, b, lambda h: f"{float(h[0]['ROUGE-L F1']):.2f} / {float(h[0]['ppl']):.2f}")
                 for b in BUDGETS]
        small = cell(rows, kv, "0.05", mib) or cell(rows, kv, "1", mib)  # a method without a budget: what it kept
        print(f"| {name(rows, kv)} | " + " | ".join(cells) + f" | {small} |")


def needle(rows):
    header(rows)

    def both(h):
        acc = {r["needle"]: float(r["accuracy"]) for r in h}
        return f"{acc.get('text', float('nan')):.2f} / {acc.get('image', float('nan')):.2f}"

    for kv in methods(rows):
        cells = [cell(rows, kv, b, both) for b in BUDGETS]
        small = cell(rows, kv, "0.05", mib) or cell(rows, kv, "1", mib)
        print(f"| {name(rows, kv)} | " + " | ".join(cells) + f" | {small} |")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("consistency", "needle"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    (consistency if sys.argv[1] == "consistency" else needle)(load(sys.argv[2]))
