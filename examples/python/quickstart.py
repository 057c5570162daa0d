"""kvfold from Python, step by step (run it as a script, or cell by cell).

    make python                      # pip install . into .venv
    .venv/bin/python examples/python/quickstart.py [MODEL.gguf]

Generates with and without a compressed cache, asks kvpress-style questions
of one compressed context, and plots which positions each layer kept
(kept_positions.png, when matplotlib is installed).
"""
import sys

import kvfold
from kvfold.presses import KnormPress, SnapKVPress

path = sys.argv[1] if len(sys.argv) > 1 else "models/smollm2-135m-instruct-q4_1.gguf"
model = kvfold.Model(path)
print(model.info["name"], model.info["arch"], f"{model.info['n_layer']} layers", kvfold.simd_level())

# %% Generation: the full cache, then 20% of it (SnapKV, the question in the prompt).
question = [{"role": "user", "content": "List three facts about the Moon."}]
print(model.generate(question, max_tokens=48))
print(model.generate(question, max_tokens=48, kv=SnapKVPress(compression_ratio=0.8)))
for piece in model.generate("Once upon a time", max_tokens=32, stream=True):
    print(piece, end="", flush=True)
print()

# %% kvpress's pipeline: the context compressed before the questions exist.
context = ("Ada's workshop is on Kepler Street. She repairs clocks on Mondays and radios on Fridays. "
           "Her apprentice, Tomas, keeps the spare keys. ") * 8
pipe = kvfold.pipeline(model)
print(pipe(context, questions=["Who keeps the spare keys?", "What does Ada repair on Fridays?"],
           press=KnormPress(compression_ratio=0.7), max_new_tokens=16)["answers"])

# %% Inspection: what each layer kept, and the memory really held.
with model.session(kv="snapkv:budget=0.25") as s:
    s.prefill_text(context)
    s.compress()
    print(s.kv_bytes)
    kept = s.kept_positions()  # [layer][kv head] -> positions
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
    else:
        import numpy as np
        grid = np.zeros((len(kept), s.n_past))
        for layer, heads in enumerate(kept):
            for pos in heads:
                grid[layer, pos] += 1 / len(heads)
        plt.imshow(grid, aspect="auto", cmap="Greys", interpolation="nearest")
        plt.xlabel("position")
        plt.ylabel("layer")
        plt.title("share of kv heads keeping each position (snapkv, 25%)")
        plt.savefig("kept_positions.png", dpi=120)
        print("kept_positions.png written")
model.close()
