"""CLI tests on Qwen2.5-Coder-Instruct Q4_K_M, a model that can answer.

usage: qwen_test.py CASE KVFOLD_BINARY MODELS_DIR TMP_DIR

The models are not fetched by `make models` / `make test`; `make models-large`
(scripts/models.sh --large) fetches them. Each case exits 77 (skipped) when the
model it needs is absent. Exit 0 = pass, 1 = fail. Standard library only.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import Ctx, Skip, check, run_case  # noqa: E402

QWEN05 = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
QWEN15 = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
QUESTION = "What is the capital of France? Answer in one word."


class QwenCtx(Ctx):
    def __init__(self, binary, models, tmp):
        super().__init__(binary, models, None, tmp)

    def path(self, name):
        return os.path.join(self.models, name)

    def model(self, name):
        path = self.path(name)
        if not os.path.isfile(path):
            raise Skip(f"{path} is absent (fetch it with `make models-large`, "
                       "i.e. scripts/models.sh --large)")
        return path


def info(ctx, path):
    rc, out, err = ctx.run("info", "-m", path, "--json")
    check(rc == 0, f"info {os.path.basename(path)}: exit {rc}: {err}")
    return json.loads(out)


def case_info(ctx):
    """Shapes from the GGUF metadata: 0.5B (required) and 1.5B (if present)."""
    want = {QWEN05: (24, 14, 2, 64), QWEN15: (28, 12, 2, 128)}
    for name, (n_layer, n_head, n_head_kv, head_dim) in want.items():
        if name == QWEN15 and not os.path.isfile(ctx.path(name)):
            print(f"note: {ctx.path(name)} is absent, only the 0.5B model is checked")
            continue
        o = info(ctx, ctx.model(name))
        got = (o["arch"], o["n_layer"], o["n_head"], o["n_head_kv"], o["head_dim"])
        check(got == ("qwen2", n_layer, n_head, n_head_kv, head_dim), f"info {name}: {got}")
        check((o["n_vocab"], o["tokenizer"], o["chat_template"], o["eos"]) ==
              (151936, "bpe:qwen2", "chatml", 151645), f"info {name}: {o}")


def case_answer(ctx):
    """Greedy (the default) chat answer to a one-word question: 'Paris'."""
    path = ctx.model(QWEN05)
    rc, out, err = ctx.run("generate", "-m", path, "--chat", "-p", QUESTION, "-n", "8", "-t", "2", "--json")
    check(rc == 0, f"generate: exit {rc}: {err}")
    o = json.loads(out)
    check("Paris" in o["text"], f"want 'Paris' in the answer, got {o['text']!r}")
    check(o["sampler"]["temp"] == 0, f"greedy by default: {o['sampler']}")
    print(f"answer: {o['text']!r} ({o['n_prompt']} prompt tokens, {o['n_gen']} generated, stop {o['stop']})")


def main():
    if len(sys.argv) < 5:
        print(__doc__, file=sys.stderr)
        return 2
    name, ctx = sys.argv[1], QwenCtx(*sys.argv[2:5])
    return run_case({"info": case_info, "answer": case_answer}, name, ctx)


if __name__ == "__main__":
    sys.exit(main())
