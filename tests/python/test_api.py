"""The Python API against the CLI and the library's own behaviour: greedy
generation equal to `kvfold generate`, kept sets equal to --dump-kv's, the
presses' specs, errors, Ctrl-C, threads, sessions copied and saved, and no
leak over many sessions."""
import gc
import json
import os
import signal
import subprocess
import threading

import numpy as np
import pytest

from conftest import CLI, FIXTURES, MODEL, need
import kvfold
from kvfold import presses

PROMPT = "The capital of France is"
CONTEXT = ("The museum opens at nine. Its oldest room holds a clock from 1702. The guard, Marta, keeps the key. " * 6)


def cli(*args):
    res = subprocess.run([need(CLI), *args], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stdout


def cli_text(*args):
    """`kvfold generate`'s text: what it prints but the newline it ends with."""
    out = cli("generate", *args)
    assert out.endswith("\n")
    return out[:-1]


@pytest.mark.parametrize("kv", [None, "snapkv:budget=0.5", presses.StreamingLLMPress(compression_ratio=0.7)])
def test_generate_equals_cli(model, kv):
    ours = model.generate(PROMPT, max_tokens=24, kv=kv)
    spec = ["--kv", str(kv)] if kv is not None else []
    assert ours == cli_text("-m", MODEL, "-p", PROMPT, "-n", "24", "-t", "1", *spec)


def test_chat_equals_cli(model):
    msg = "Name three colours."
    ours = model.generate([{"role": "user", "content": msg}], max_tokens=20, kv=presses.KnormPress(0.5))
    assert ours == cli_text("-m", MODEL, "-p", msg, "--chat", "-n", "20", "-t", "1", "--kv", "knorm:budget=0.5")


def test_stream_and_stop(model):
    whole = model.generate(PROMPT, max_tokens=24)
    pieces = list(model.generate(PROMPT, max_tokens=24, stream=True))
    assert len(pieces) > 1 and "".join(pieces) == whole
    stop = whole[len(whole) // 2:len(whole) // 2 + 3]
    assert model.generate(PROMPT, max_tokens=24, stop=stop) == whole[:whole.index(stop)]


def test_kept_sets_equal_dump_kv(model, tmp_path):
    spec = "snapkv:budget=0.3"
    dump = tmp_path / "kv.json"
    cli("generate", "-m", MODEL, "-p", CONTEXT, "-n", "1", "-t", "1", "--kv", spec, "--dump-kv", str(dump))
    with model.session(kv=spec) as s:
        s.prefill_text(CONTEXT)
        s.compress()
        kept = s.kept_positions()
        want = json.load(open(dump))["compressed"]
        assert [[k.tolist() for k in layer] for layer in kept] == want
        tags = s.kv_tags(0, 0)
        assert tags.dtype.names == ("pos", "modality", "media", "row", "col")
        b = s.kv_bytes
        assert 0 < b["kept"] < b["full"] <= b["peak"]
        assert s.logits.shape == (model.n_vocab,) and s.logits.dtype == np.float32 and not s.logits.flags.writeable


def test_cache_types(model):
    """kv_type sets keys and values; type_k / type_v each alone, over it:
    the bytes are those of the rows (SmolLM2's 64 values: f16 128 bytes,
    q8_0 68, q4_0 36; 12 bytes of tag an entry); a bad name is refused."""
    got = {}
    for opts in ({}, {"kv_type": "q8_0"}, {"type_k": "q8_0", "type_v": "q4_0"}, {"kv_type": "q4_0", "type_k": "f16"}):
        with model.session(**opts) as s:
            s.prefill_text(CONTEXT)
            got[tuple(sorted(opts.items()))] = s.kv_bytes["kept"]
    entry = [2 * 128 + 12, 2 * 68 + 12, 68 + 36 + 12, 128 + 36 + 12]
    b = list(got.values())
    assert all(b[i] * entry[0] == b[0] * entry[i] for i in range(4)), got
    # a position in every one of SmolLM2's 30 layers of 3 kv heads
    heads = 30 * 3
    assert model.kv_position_bytes() == heads * entry[0]
    assert model.kv_position_bytes(type_k="q8_0", type_v="q4_0") == heads * entry[2]
    assert model.kv_position_bytes("q4_0", type_k="f16") == heads * entry[3]
    assert model.kv_position_bytes(type_k="q4_0s", type_v="q4_0h") == heads * (36 + 36 + 12)
    # KVzip's reconstruction holds the context's text again, and its instruction, while it compresses
    assert model.kv_compress_positions("snapkv", 100) == 0 and model.kv_compress_positions(None, 100) == 0
    assert 100 < model.kv_compress_positions("kvzip", 100) < model.kv_compress_positions("kvzip", 200) < 400
    with pytest.raises(kvfold.KVFoldError) as e:
        model.session(type_k="q4_0s", type_v="q4_0s")
    assert e.value.status_name == "unsupported" and "for keys" in str(e.value)
    with pytest.raises(kvfold.KVFoldError) as e:
        model.session(type_v="q5")
    assert e.value.status_name == "invalid_arg" and "q4_0h" in str(e.value)


def test_presses_map_to_specs():
    P = presses
    table = [
        (P.SnapKVPress(compression_ratio=0.8), "snapkv:budget=0.2,window=64,kernel=5"),
        (P.KnormPress(0.5), "knorm:budget=0.5"),
        (P.KeyDiffPress(0.9), "keydiff:budget=0.1"),
        (P.StreamingLLMPress(0.75, n_sink=8), "streaming:budget=0.25,sinks=8"),
        (P.PyramidKVPress(0.5), "pyramidkv:budget=0.5,window=64,kernel=5,beta=20"),
        (P.ExpectedAttentionPress(0.5), "expected:budget=0.5,sinks=4,future=512"),
        (P.KVzipPress(0.9), "kvzip:budget=0.1"),
        (P.KVzapPress(0.8), "kvzap:budget=0.2"),
        (P.KVzapPress(0.5, scorer="/tmp/m.kvzap"), "kvzap:budget=0.5,scorer=/tmp/m.kvzap"),
        (P.ThresholdPress(P.KVzapPress(), threshold=-4), "kvzap+budget=threshold:tau=-4,last=128"),
        (P.TOVAPress(0.5), "tova:budget=0.5"),
        (P.AdaKVPress(P.SnapKVPress(0.5)), "snapkv:budget=0.5,window=64,kernel=5+budget=adaptive:floor=0.2"),
        (P.DecodingPress(P.KnormPress(0.5), compression_interval=32, target_size=256),
         "knorm:budget=256+decode=recompress:every=32"),
        (P.LookMPress(0.8), "lookm:budget=0.2,recent=0.5,merge=pivotal,text_prior=1"),
        (P.CSPPress(0.8), "csp:budget=0.2,recent=0.5,cross_ratio=0.5,n=1,window=0"),
        (P.PrefixKVPress(0.8), "prefixkv:budget=0.2"),
        (P.BlockwisePress(budget=512, block="image"), "blockwise:budget=512,block=image,evict=snapkv,question=0"),
        (P.LightKVPress(), "lightkv:ratio=0.5"),
        (P.FastVPress(k=3, r=0.75), "fastv:k=3,r=0.75"),
        (P.ToMePress(0.5), "tome:ratio=0.5"),
        (P.ThresholdPress(P.KVzipPress(), threshold=0.01), "kvzip+budget=threshold:tau=0.01,last=128"),
        (P.ThresholdPress(P.KeyDiffPress(), -0.2, 64, decoding=True),
         "keydiff+budget=threshold:tau=-0.2,last=64+decode=recompress:every=64"),
    ]
    for press, spec in table:
        assert str(press) == spec
        kvfold.check_spec(spec)
    with pytest.raises(ValueError):
        P.SnapKVPress(compression_ratio=1.0)
    # dataclasses, as kvpress's presses are: the fields in repr, equal when the fields are
    assert repr(P.SnapKVPress(0.8)) == "SnapKVPress(compression_ratio=0.8, window_size=64, kernel_size=5)"
    assert P.SnapKVPress(0.8) == P.SnapKVPress(compression_ratio=0.8) != P.SnapKVPress(0.5)
    ada = "AdaKVPress(press=KnormPress(compression_ratio=0.5), alpha_safeguard=0.2)"
    assert repr(P.AdaKVPress(P.KnormPress(0.5))) == ada


def test_errors(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 32)
    with pytest.raises(kvfold.KVFoldError) as e:
        kvfold.Model(str(bad))
    assert e.value.status_name == "format"
    with pytest.raises(kvfold.KVFoldError) as e:
        kvfold.Model(str(tmp_path / "absent.gguf"))
    assert e.value.status_name == "io" and "absent.gguf" in str(e.value)
    with pytest.raises(kvfold.KVFoldError) as e:
        kvfold.check_spec("snapkv:budget=2.5x")
    assert e.value.status_name == "invalid_arg" and "snapkv" in str(e.value)


def test_bad_spec_in_session(tiny):
    with pytest.raises(kvfold.KVFoldError) as e:
        tiny.session(kv="nosuchpolicy")
    assert e.value.status == kvfold._lib.KVF_ERR_INVALID_ARG


def test_interrupt_stops_at_next_token(model):
    """SIGINT from another thread while tokens are being made (inside the
    library's calls, most of the time): KeyboardInterrupt at the next
    token, and the session goes on."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # even where SIGINT came in ignored
    got, first = [], threading.Event()
    main = threading.get_ident()

    def interrupt():
        first.wait(30)
        signal.pthread_kill(main, signal.SIGINT)
    try:
        with model.session() as s:
            s.prefill_text(PROMPT)
            t = threading.Thread(target=interrupt)
            t.start()
            with pytest.raises(KeyboardInterrupt):
                for piece in s.generate(200):
                    got.append(piece)
                    first.set()
            t.join()
            assert 1 <= len(got) < 200
            n = s.n_past
            s.decode(model.tokenize(" and", add_bos=False)[0])
            assert s.n_past == n + 1
    finally:
        signal.signal(signal.SIGINT, previous)


def test_generated_tokens_are_in_the_cache(model):
    """Every token generate() gave out is in the cache when the session goes
    on (the last one decoded by the next call), not before it is needed."""
    with model.session() as s:
        s.prefill_text(PROMPT)
        n0 = s.n_past
        text = "".join(s.generate(6))
        assert s.n_past == n0 + 5  # the sixth waits
        s.prefill(model.tokenize(" Then", add_bos=False))
        ids = s.tokens[n0:]
        assert len(ids) == 7 and model.detokenize(ids[:6]) == text


def test_two_threads_one_model(model):
    want = model.generate(PROMPT, max_tokens=16, kv="keydiff:budget=0.5")
    out = [None, None]

    def run(i):
        out[i] = model.generate(PROMPT, max_tokens=16, kv="keydiff:budget=0.5")
    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == [want, want]


def test_copy_save_load(model, tmp_path):
    with model.session(kv="knorm:budget=0.5") as s:
        s.prefill_text(CONTEXT)
        s.compress()
        with s.copy() as c:
            assert np.array_equal(c.logits, s.logits)
            a = "".join(s.generate(8))
            assert "".join(c.generate(8)) == a
        path = tmp_path / "s.kvf"
        s.save(path)
        data = s.to_bytes()
        with model.load_session(path) as l1, kvfold.Session.from_bytes(model, data) as l2:
            assert l1.kv_spec == "knorm:budget=0.5" and l1.n_past == s.n_past
            assert np.array_equal(l1.logits, s.logits) and np.array_equal(l2.logits, s.logits)


def test_pipeline_questions_are_asked_after(model):
    """Each question runs on the same compressed context: SnapKV, which
    scores with the prompt's last queries, never sees a question, so the
    answers one at a time equal the answers together."""
    pipe = kvfold.pipeline(model)
    qs = ["Who keeps the key?", "How old is the clock?"]
    both = pipe(CONTEXT, questions=qs, press=presses.SnapKVPress(0.5), max_new_tokens=12)["answers"]
    one = [pipe(CONTEXT, question=q, press="snapkv:budget=0.5,window=64,kernel=5", max_new_tokens=12)["answer"]
           for q in qs]
    assert both == one and all(both)


def test_kvzap_calibrate(model, tmp_path):
    """A scorer fitted from Python reads back through the press; a callback
    that says stop keeps the spans done; bad parameters raise."""
    path = str(tmp_path / "smol.kvzap")
    corpus = [open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "METHODS.md")).read()]
    seen = []
    rep = model.kvzap_calibrate(corpus, path, samples=6, test=2, span=32, per_span=16, threads=2,
                                progress=lambda done, total: seen.append((done, total)) or done < 3)
    assert rep["samples"] == 3 and rep["test"] == 0 and rep["rows"] == 48 and seen[-1] == (3, 8)
    assert len(rep["r2"]) == 30 and rep["r2"][0] is None
    rep = model.kvzap_calibrate(corpus, path, samples=6, test=2, span=32, per_span=16, threads=2)
    assert rep["test"] == 2 and all(-1 <= r <= 1 for r in rep["spearman"])
    pipe = kvfold.pipeline(model)
    out = pipe(CONTEXT, question="Who keeps the key?", press=presses.KVzapPress(0.5, scorer=path), max_new_tokens=8)
    assert out["answer"]
    with pytest.raises(kvfold.KVFoldError) as e:
        model.kvzap_calibrate(corpus, path, span=8)
    assert e.value.status_name == "invalid_arg"


def test_images_and_handles():
    img = kvfold.Image(np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3))
    pix = img.pixels
    assert pix.shape == (4, 5, 3) and pix[1, 2, 0] == 21 and not pix.flags.writeable
    img.close()
    img.close()  # once only
    with pytest.raises(ValueError):
        img.pixels
    assert kvfold.Image(np.zeros((2, 2, 3), np.uint8)).pixels.sum() == 0  # the view keeps its image


def test_model_and_session_lifetimes():
    m = kvfold.Model(need(os.path.join(FIXTURES, "llama-f32.gguf")), threads=1)
    s = m.session()
    s.prefill([1, 2])
    logits = s.logits
    del m
    gc.collect()
    s.prefill([3])  # the session keeps its model
    assert logits.shape[0] == s.model.n_vocab and np.array_equal(logits, s.logits)  # a view of the latest
    s.model.close()  # closing the model closes its sessions first
    with pytest.raises(ValueError):
        s.prefill([4])
    s.close()


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_leak_over_200_sessions(model):
    """Sessions opened, prefilled from text, compressed, generating and
    closed: the resident set stays put (a session's cache alone is about
    0.5 MiB here, so a leaked one shows 100 MiB)."""
    def once():
        with model.session(kv="snapkv:budget=0.5", n_ctx=64) as s:
            s.prefill_text(CONTEXT[:48])
            s.compress()
            "".join(s.generate(2))
    for _ in range(20):  # allocator and caches warm
        once()
    gc.collect()
    before = rss_bytes()
    for _ in range(200):
        once()
    gc.collect()
    assert rss_bytes() - before < 8 << 20


def test_installed_package_and_command(tmp_path):
    """The package pip installed (make python), from outside the source tree:
    its own libkvfold.so and the `kvfold` command beside the interpreter."""
    import sys
    env = {k: v for k, v in os.environ.items() if k not in ("KVFOLD_LIBRARY", "PYTHONPATH")}
    res = subprocess.run([sys.executable, "-c", "import kvfold, os; print(os.path.dirname(kvfold._lib.lib._name))"],
                         capture_output=True, text=True, cwd=tmp_path, env=env)
    if "ModuleNotFoundError" in res.stderr:
        pytest.skip("kvfold is not installed in this interpreter (make python installs it)")
    assert res.returncode == 0, res.stderr
    assert "site-packages" in res.stdout
    exe = os.path.join(os.path.dirname(sys.executable), "kvfold")
    assert subprocess.run([exe, "--version"], capture_output=True, text=True).returncode == 0
    out = subprocess.run([sys.executable, "-c", "import kvfold; m = kvfold.Model(%r, threads=1); "
                          "print(m.generate(%r, max_tokens=12), end='')" % (need(MODEL), PROMPT)],
                         capture_output=True, text=True, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout == cli_text("-m", MODEL, "-p", PROMPT, "-n", "12", "-t", "1")
