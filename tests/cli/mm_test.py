"""End-to-end tests of the kvfold CLI's multimodal input, one case per ctest entry.

usage: mm_test.py CASE KVFOLD_BINARY MODELS_DIR FIXTURE_DIR TMP_DIR

The tiny LLaVA fixture (llava-f32.gguf + llava-mmproj-*.gguf, llava-st/) comes
from make_fixture; pseudo-image cases use the real SmolLM2 file. Exit status
0 = pass, 1 = fail, 77 = skipped (a file is absent). Standard library only.
"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import SMOL, Ctx, Skip, check, expect_error, run_case  # noqa: E402

GRID = 8  # the fixture's CLIP: image 32, patch 4
PROMPT = "USER: <image>\n<image>\nWhat changed? ASSISTANT:"


def write_ppm(path, w, h, seed):
    rnd = random.Random(seed)
    with open(path, "wb") as f:
        f.write(b"P6\n%d %d\n255\n" % (w, h))
        f.write(bytes(rnd.randrange(256) for _ in range(w * h * 3)))
    return path


class MM(Ctx):
    def __init__(self, binary, models, fixtures, tmp):
        super().__init__(binary, models, "", tmp)
        self.fixtures = fixtures

    def fixture(self, name):
        path = os.path.join(self.fixtures, name)
        if not os.path.exists(path):
            raise Skip(f"{path} is absent (the fixtures_make test writes it)")
        return path

    def llava(self):
        return ["-m", self.fixture("llava-f32.gguf"), "--mmproj", self.fixture("llava-mmproj-f32.gguf")]

    def images(self, n):
        return [write_ppm(os.path.join(self.tmp, f"img{i}.ppm"), 20 + 7 * i, 13 + 5 * i, i) for i in range(n)]


def tags_of(ctx, args):
    rc, out, err = ctx.run("generate", *args, "-n", "3", "--json", "--dump-tags")
    check(rc == 0, f"generate {args}: exit {rc}: {err}")
    return json.loads(out)


def check_image_tags(tags, n_images, modality="image", contiguous=False):
    """n_images runs of GRID*GRID positions of `modality` (media index k for the
    k-th run), row-major grid cells; contiguous: the runs follow each other."""
    starts = [i for i, t in enumerate(tags) if t[1] == modality and (i == 0 or tags[i - 1][1] != modality)]
    if contiguous:
        starts = [starts[0] + k * GRID * GRID for k in range(n_images)] if starts else []
    check(len(starts) == n_images, f"{len(starts)} {modality} runs, want {n_images}")
    for k, first in enumerate(starts):
        run = tags[first: first + GRID * GRID]
        for t, (pos, mod, media, row, col, tok) in enumerate(run):
            check(mod == modality and media == k and row == t // GRID and col == t % GRID and tok == -1,
                  f"position {pos}: tag {mod} {media} {row} {col} {tok}, want {modality} {k} {t // GRID} {t % GRID}")


def case_mm_generate(ctx):
    a, b = ctx.images(2)
    o = tags_of(ctx, [*ctx.llava(), "-p", PROMPT, "--image", a, "--image", b])
    tags = o["tags"]
    check(o["n_media"] == 2 and not o["synthetic"], f"n_media / synthetic: {o['n_media']} {o['synthetic']}")
    check(len(tags) == o["n_prompt"], "one tag per prompt position")
    check([t[0] for t in tags] == list(range(len(tags))), "positions 0..n-1")
    first = next(i for i, t in enumerate(tags) if t[1] == "image")
    check(tags[0][1] == "text" and tags[0][5] >= 0, "the prompt starts with text")
    check_image_tags(tags, 2)
    n_img = sum(t[1] == "image" for t in tags)
    check(n_img == 2 * GRID * GRID, f"{n_img} image positions, want {2 * GRID * GRID}")
    check(all(t[2] == -1 and t[3] == -1 for t in tags if t[1] == "text"), "text tags carry no media index or cell")
    check(o["timings"]["vision_encode_ms"] > 0, "vision encoding time is reported")
    # The HF directory holds the same model: the same tags and the same greedy text.
    o2 = tags_of(ctx, ["-m", ctx.fixture("llava-st"), "-p", PROMPT, "--image", a, "--image", b])
    check(o2["tags"] == tags and o2["text"] == o["text"], "llava-st agrees with the GGUF pair")
    # Plain-text output mode prints the table.
    rc, out, err = ctx.run("generate", *ctx.llava(), "-p", PROMPT, "--image", a, "--image", b, "-n", "2", "--dump-tags")
    check(rc == 0 and out.startswith("# pos modality media row col token"), f"--dump-tags table: {rc} {err}")
    check(f"{first} image 0 0 0" in out, "the table lists the first image cell")
    # A text-only prompt still works with a vision model loaded.
    rc, out, err = ctx.run("generate", *ctx.llava(), "-p", "hello there", "-n", "2")
    check(rc == 0, f"text-only prompt: {err}")


def case_mm_video(ctx):
    vdir = os.path.join(ctx.tmp, "video")
    os.makedirs(vdir, exist_ok=True)
    for i in range(3):  # out of order on purpose: frames are read in name order
        write_ppm(os.path.join(vdir, f"frame_{2 - i:03d}.ppm"), 24, 18, 10 + i)
    with open(os.path.join(vdir, "notes.txt"), "w") as f:
        f.write("not a frame")
    o = tags_of(ctx, [*ctx.llava(), "-p", "Watch: <video> What happens?", "--video", vdir])
    tags = o["tags"]
    check_image_tags(tags, 3, modality="video", contiguous=True)
    # The same frames one by one.
    frames = [os.path.join(vdir, f"frame_{i:03d}.ppm") for i in range(3)]
    o2 = tags_of(ctx, [*ctx.llava(), "-p", "Watch: <video> What happens?",
                       *[x for f in frames for x in ("--frame", f)]])
    check(o2["tags"] == tags and o2["text"] == o["text"], "--frame x3 equals --video DIR")
    # Two videos in a row fill a marker each, frame indices from 0 in each.
    o3 = tags_of(ctx, [*ctx.llava(), "-p", "Watch: <video> then <video> What changed?", "--video", vdir,
                       "--video", vdir])
    runs = []  # the frame indices of each run of video positions
    for i, t in enumerate(o3["tags"]):
        if t[1] == "video":
            if i == 0 or o3["tags"][i - 1][1] != "video":
                runs.append([])
            if t[2] not in runs[-1]:
                runs[-1].append(t[2])
    check(runs == [[0, 1, 2], [0, 1, 2]], f"two videos: frame indices by run {runs}")
    expect_error(ctx, 2, ["generate", *ctx.llava(), "-n", "1", "-p", "<video>", "--video", vdir, "--video", vdir],
                 "one <video> marker, two videos")
    # llama.cpp's image-token flags bound Qwen images; LLaVA's fixed grid ignores them.
    rc, out, err = ctx.run("info", *ctx.llava(), "--image-max-tokens", "4")
    check(rc == 0 and "-> 64 tokens (8x8 grid)" in out, f"LLaVA ignores --image-max-tokens: {rc} {err}")
    expect_error(ctx, 1, ["info", *ctx.llava(), "--image-min-tokens", "-1"], "negative --image-min-tokens")
    gemma = ["-m", ctx.fixture("gemma3v-f32.gguf"), "--mmproj", ctx.fixture("gemma3v-mmproj-f32.gguf")]
    line = expect_error(ctx, 2, ["generate", *gemma, "-n", "1", "-p", "<video>", "--video", vdir], "Gemma 3 video")
    check("images only" in line, f"the error says Gemma 3 reads images only: {line}")


def case_mm_errors(ctx):
    a, b = ctx.images(2)
    llava = ctx.llava()
    bad = os.path.join(ctx.tmp, "corrupt.png")
    with open(bad, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
    text = os.path.join(ctx.tmp, "text.jpg")
    with open(text, "w") as f:
        f.write("this is not an image\n")
    empty = os.path.join(ctx.tmp, "empty.ppm")
    open(empty, "wb").close()
    big = write_ppm(os.path.join(ctx.tmp, "big.ppm"), 400, 300, 3)
    cases = [
        (2, ["-p", "<image> <image> <image>", "--image", a, "--image", b], "more markers than images"),
        (2, ["-p", "<image> only one", "--image", a, "--image", b], "more images than markers"),
        (2, ["-p", "no marker", "--image", a], "image without a marker"),
        (2, ["-p", "<image>", "--image", bad], "corrupt PNG"),
        (2, ["-p", "<image>", "--image", text], "not an image"),
        (2, ["-p", "<image>", "--image", empty], "empty file"),
        (2, ["-p", "<image>", "--image", os.path.join(ctx.tmp, "missing.png")], "missing file"),
        (2, ["-p", "<image>", "--image", big, "--max-image-mpix", "0.1"], "over the pixel limit"),
        (2, ["-p", "<video>", "--image", a], "<video> given an image"),
        (2, ["-p", "<image>", "--frame", a], "<image> given a frame"),
        (2, ["-p", "<video>", "--video", os.path.join(ctx.tmp, "no-such-dir")], "missing video directory"),
    ]
    for code, args, what in cases:
        expect_error(ctx, code, ["generate", *llava, "-n", "1", *args], what)
    m = ctx.fixture("llava-f32.gguf")
    line = expect_error(ctx, 2, ["generate", "-m", m, "--mmproj", ctx.fixture("llava-mmproj-badproj.gguf"),
                                 "-p", "<image>", "--image", a], "projector width mismatch")
    check("projector" in line, f"the error names the projector: {line}")
    expect_error(ctx, 2, ["generate", "-m", m, "-p", "<image>", "--image", a], "image for a text-only model")
    expect_error(ctx, 2, ["generate", "-m", m, "--mmproj", m, "-p", "hi"], "a decoder given as mmproj")
    expect_error(ctx, 2, ["generate", "-m", ctx.fixture("llava-st"), "--mmproj",
                          ctx.fixture("llava-mmproj-f32.gguf"), "-p", "hi"], "mmproj for a directory with a vision tower")
    expect_error(ctx, 1, ["generate", *llava, "-p", "<image>", "--pseudo-image", "words.txt"], "pseudo-image without RxC")
    # Damaged mmproj files, made from the good one by same-length byte edits.
    with open(ctx.fixture("llava-mmproj-f32.gguf"), "rb") as f:
        good = f.read()
    key = b"clip.vision.patch_size"
    at = good.index(key) + len(key) + 4  # then the u32 type tag and the value
    damaged = [
        (good[: len(good) // 2], "truncated mmproj"),
        (good.replace(b"mlp", b"ldp", 1), "unknown projector type"),
        (good.replace(b"v.blk.0.attn_q.weight", b"v.blk.0.attn_x.weight", 1), "missing tensor"),
        (good[:at] + (5).to_bytes(4, "little") + good[at + 4:], "image size not a multiple of the patch"),
    ]
    for i, (data, what) in enumerate(damaged):
        path = os.path.join(ctx.tmp, f"mmproj-bad{i}.gguf")
        with open(path, "wb") as f:
            f.write(data)
        expect_error(ctx, 2, ["generate", "-m", m, "--mmproj", path, "-p", "hi", "-n", "1"], what)


def case_pseudo(ctx):
    smol = ctx.model(SMOL)
    words = os.path.join(ctx.tmp, "words.txt")
    with open(words, "w") as f:
        f.write("red apple on a wooden table near the window")
    o = tags_of(ctx, ["-m", smol, "-p", "Look: <image>\nWhat fruit is it?", "--pseudo-image", f"{words}:4x6",
                      "--pseudo-noise", "0.1"])
    check(o["synthetic"] is True, "pseudo-images mark the output synthetic")
    tags = o["tags"]
    img = [t for t in tags if t[1] == "image"]
    check(len(img) == 24, f"{len(img)} image positions, want 4x6")
    check([(t[3], t[4]) for t in img] == [(r, c) for r in range(4) for c in range(6)], "row-major 4x6 cells")
    rc, out, err = ctx.run("generate", "-m", smol, "-p", "<image> hi", "--pseudo-image", f"{words}:2x2", "-n", "2")
    check(rc == 0 and "synthetic" in err, f"the text mode says synthetic: {err}")
    expect_error(ctx, 1, ["generate", "-m", smol, "-p", "<image>", "--pseudo-image", f"{words}:0x3"], "0 rows")
    expect_error(ctx, 2, ["generate", "-m", smol, "-p", "<image>", "--pseudo-image",
                          os.path.join(ctx.tmp, "nope.txt") + ":2x2"], "missing words file")


def case_mm_bench(ctx):
    rc, out, err = ctx.run("bench", *ctx.llava(), "--images", "2", "-p", "0", "-n", "0", "-r", "1", "--json")
    check(rc == 0, f"bench --images: {err}")
    mm = json.loads(out)["multimodal"]
    check(mm["n_media"] == 2 and mm["n_encoded"] == 2 and mm["n_tokens"] > 2 * GRID * GRID, f"bench: {mm}")
    check(mm["encode_ms_per_image"] > 0 and mm["ttft_ms"] >= mm["prefill_ms"] > 0 and mm["kv_bytes"] > 0,
          f"bench timings: {mm}")
    smol = ctx.model(SMOL)
    words = os.path.join(ctx.tmp, "w.txt")
    with open(words, "w") as f:
        f.write("a cat sat on the mat")
    rc, out, err = ctx.run("bench", "-m", smol, "--pseudo-image", f"{words}:8x8", "-p", "0", "-n", "0", "-r", "1",
                           "--json")
    check(rc == 0 and json.loads(out)["multimodal"]["synthetic"] is True, f"bench pseudo: {err}")
    expect_error(ctx, 2, ["bench", "-m", smol, "--images", "1", "-p", "0", "-n", "0"], "--images on a text model")


MB_INSTR = "Find the secret in the pictures and the text. "


def milebench_dir(ctx):
    """A tiny data set in MileBench's layout: a text needle task (3 images),
    a multi-choice task (2 images, options) and an open-ended one."""
    root = os.path.join(ctx.tmp, "MileBench")
    tasks = {
        "TextNeedleInAHaystack": ("open-ended", [
            {"context": "{image#1} The secret number is 4213. {image#2} Then a long walk by the river "
                        "and the boats and the bridge. {image#3} What is the secret number?", "response": "4213",
             "n": 3},
            {"context": "{image#1}{image#2} The password is blue. What is the password?", "response": "blue", "n": 2},
        ]),
        "WebQA": ("multi-choice", [
            {"context": "{image#1}Image Caption #1: a red house {image#2}Image Caption #2: a blue boat "
                        "Question: Which is red?", "choices": ["The house.", "The boat.", "Neither (none)."],
             "response": "The house.", "n": 2},
        ]),
        "ALFRED": ("open-ended", [
            {"context": "Your goal: put a mug away. Step 1: {image#1} Current step:",
             "response": "Walk to the cupboard and open it.", "n": 1},
        ]),
    }
    for name, (qtype, samples) in tasks.items():
        os.makedirs(os.path.join(root, name, "images"), exist_ok=True)
        data = []
        for k, smp in enumerate(samples):
            paths = [f"{k}_{i}.ppm" for i in range(smp["n"])]
            for i, p in enumerate(paths):
                write_ppm(os.path.join(root, name, "images", p), 24 + 5 * i, 18 + 3 * k, 100 * k + i)
            inst = {"context": smp["context"], "images_path": paths}
            if "choices" in smp:
                inst["choice_list"] = smp["choices"]
            data.append({"sample_id": k, "task_instruction_id": k % 2, "task_instance": inst,
                         "response": smp["response"], "image_quantity_level": "Few"})
        meta = {"dataset": name, "split": "core", "num_sample": len(data),
                "task_instruction": [MB_INSTR, "Look at the images and answer. "], "question_type": qtype}
        with open(os.path.join(root, name, f"{name}.json"), "w") as f:
            json.dump({"meta_data": meta, "data": data}, f)
    return root, tasks


def mb_kept_images(ctx, instr, context, n_images, max_ctx):
    """MileBench's generate.py truncation, rewritten here: fragments and
    images taken from the end while they fit; the images kept."""
    def count(text):
        if not text:
            return 0
        rc, out, err = ctx.run("tokenize", "-m", ctx.fixture("llava-f32.gguf"), "-p", text)
        check(rc == 0, f"tokenize: {err}")
        return len(out.split())
    room, past, kept, chunks = max_ctx - count(instr), 0, 0, 0
    for frag in context.split("<ImageHere>")[::-1]:
        n = count(frag)
        if n + past > room:
            break
        chunks, past = chunks + 1, past + n
        if GRID * GRID + past > room:
            break
        if kept < n_images:
            kept, past = kept + 1, past + GRID * GRID
    return kept


def case_milebench(ctx):
    """kvfold eval milebench on a hand-made data set in MileBench's layout
    with the tiny LLaVA fixture: one row per (task, sample, run); every
    score equals MileBench's rule applied to the row's output (the Python
    reference of tests/ref/milebench_ref.py); prompts cut to --ctx keep the
    images MileBench's truncation keeps; bad data sets are input errors."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
    try:
        import milebench_ref
        milebench_ref.rouge_l("a", "a")
    except ImportError as e:
        raise Skip(f"the milebench reference needs rouge: {e}")
    root, tasks = milebench_dir(ctx)
    base = ["eval", "milebench", *ctx.llava(), "--data", root, "-n", "6", "-t", "2", "--json"]
    rc, out, err = ctx.run(*base, "--kv", "snapkv", "--kv", "lightkv", "--budgets", "0.5")
    check(rc == 0, f"milebench: exit {rc}: {err}")
    rows = [json.loads(ln) for ln in out.splitlines()]
    n_samples = sum(len(s) for _, s in tasks.values())
    check(len(rows) == 3 * n_samples, f"{len(rows)} rows, want {3 * n_samples} (full, snapkv 0.5, lightkv)")
    check([r["task"] for r in rows[::3]] == ["ALFRED", "TextNeedleInAHaystack", "TextNeedleInAHaystack", "WebQA"],
          f"tasks in name order: {[r['task'] for r in rows[::3]]}")
    for r in rows:
        qtype, samples = tasks[r["task"]]
        smp = samples[int(r["sample_id"])]
        rule = ("needle" if "NeedleInAHaystack" in r["task"] else "rouge" if qtype == "open-ended" else "choice")
        want = milebench_ref.score(rule, r["output"], smp["response"], smp.get("choices", []))
        check(abs(r["score"] - want) < 1e-12, f"{r['task']} {r['sample_id']} {r['kv']}: score {r['score']}, "
              f"MileBench's rule gives {want} for {r['output']!r}")
        check(r["gt"] == smp["response"] and r["images"] == smp["n"] and r["image_quantity_level"] == "Few",
              f"row fields {r}")
        check(r["metric"] == ("ROUGE-L" if rule == "rouge" else "accuracy"), f"metric {r['metric']} for {r['task']}")
    # cut to --ctx: the needle sample keeps only the images MileBench keeps
    needle = tasks["TextNeedleInAHaystack"][1][0]
    context = needle["context"]
    for i in range(3):
        context = context.replace("{image#%d}" % (i + 1), "<ImageHere>")
    for max_ctx in (300, 299, 210, 209, 110, 60):
        want = mb_kept_images(ctx, MB_INSTR, context, 3, max_ctx)
        rc, out, err = ctx.run(*base, "--tasks", "TextNeedleInAHaystack", "--samples", "1", "--ctx", str(max_ctx),
                               "--kv", "full")
        check(rc == 0, f"--ctx {max_ctx}: {err}")
        got = json.loads(out.splitlines()[0])
        check(got["images"] == want, f"--ctx {max_ctx}: {got['images']} images kept, MileBench keeps {want}")
    # a table by task without --json
    rc, out, err = ctx.run(*base[:-1], "--kv", "streaming", "--budgets", "0.5", "--tasks", "WebQA,ALFRED")
    check(rc == 0 and "| WebQA | accuracy |" in out and "| ALFRED | ROUGE-L |" in out and "Needle" not in out,
          f"summary by task: {out} {err}")
    # bad data
    plain = ["eval", "milebench", *ctx.llava(), "-n", "2"]
    expect_error(ctx, 1, [*plain], "no --data")
    expect_error(ctx, 2, [*plain, "--data", os.path.join(ctx.tmp, "absent")], "missing folder")
    expect_error(ctx, 2, [*plain, "--data", ctx.tmp], "no task inside")
    expect_error(ctx, 1, [*plain, "--data", root, "--tasks", "WebQA,Nope"], "unknown task")
    expect_error(ctx, 1, ["eval", "milebench", "-m", ctx.model(SMOL), "--data", root, "-n", "2"], "text-only model")
    for name, edit, why in (
            ("WebQA", lambda d: d["data"][0].update(response="Something else."), "response not an option"),
            ("ALFRED", lambda d: d["data"][0]["task_instance"].update(context="a {image#1} b {image#1}"), "placeholders"),
            ("ALFRED", lambda d: d["data"][0].update(task_instruction_id=7), "instruction id"),
            ("ALFRED", lambda d: d["data"][0]["task_instance"].update(images_path=["absent.png"]), "missing image"),
            # Paths out of the images folder, to images that exist (copied beside it below).
            ("ALFRED", lambda d: d["data"][0]["task_instance"].update(images_path=["../out.ppm"]), "path with .."),
            ("ALFRED", lambda d: d["data"][0]["task_instance"].update(images_path=["a/../../out.ppm"]), "inner .."),
            ("ALFRED", lambda d: d["data"][0]["task_instance"].update(
                images_path=[os.path.join(ctx.tmp, "broken", "ALFRED", "out.ppm")]), "absolute path"),
            ("ALFRED", lambda d: d.pop("meta_data"), "no meta_data"),
            ("ALFRED", lambda d: d["meta_data"].update(question_type="ranking"), "question type")):
        broken = os.path.join(ctx.tmp, "broken", name)
        os.makedirs(os.path.join(broken, "images"), exist_ok=True)
        with open(os.path.join(root, name, f"{name}.json")) as f:
            d = json.load(f)
        edit(d)
        with open(os.path.join(broken, f"{name}.json"), "w") as f:
            json.dump(d, f)
        for p in os.listdir(os.path.join(root, name, "images")):
            with open(os.path.join(root, name, "images", p), "rb") as src, \
                    open(os.path.join(broken, "images", p), "wb") as dst:
                dst.write(src.read())
            with open(os.path.join(root, name, "images", p), "rb") as src, \
                    open(os.path.join(broken, "out.ppm"), "wb") as dst:
                dst.write(src.read())
        expect_error(ctx, 2, [*plain, "--data", broken], why)
    with open(os.path.join(ctx.tmp, "broken", "ALFRED", "ALFRED.json"), "w") as f:
        f.write('{"meta_data": {"task_instruction": ["x"], "question_type": "open-ended"}, "data": [')
    expect_error(ctx, 2, [*plain, "--data", os.path.join(ctx.tmp, "broken", "ALFRED")], "truncated JSON")


def main():
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    name, ctx = sys.argv[1], MM(*sys.argv[2:6])
    cases = {"mm_generate": case_mm_generate, "mm_video": case_mm_video, "mm_errors": case_mm_errors,
             "pseudo": case_pseudo, "mm_bench": case_mm_bench, "milebench": case_milebench}
    return run_case(cases, name, ctx)


if __name__ == "__main__":
    sys.exit(main())
