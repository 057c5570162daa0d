"""kvfold bench as llama-bench users expect it, progress on stderr and Ctrl-C
in bench and perplexity; one case per ctest entry.

usage: bench_test.py CASE KVFOLD_BINARY MODELS_DIR SHARED_DIR TMP_DIR

Exit status 0 = pass, 1 = fail, 77 = skipped (the model is absent).
Standard library only. The runs use -t 1 and -r 1 where they can: the
machines that run the suite have few cores.
"""
import csv
import io
import json
import math
import os
import re
import select
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import SMOL, Ctx, check, expect_error, interrupt_at, run_case  # noqa: E402

PASSAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "ppl_passage.txt")
MD_HEAD = ["model", "size", "params", "backend", "threads", "kv", "kv MiB", "test", "t/s"]


def md_table(out):
    """The rows of the markdown table that stdout must be: a header, the
    alignment row, then one row per test; after the table only a blank line,
    notes and the build line."""
    lines = out.splitlines()
    table = [ln for ln in lines if ln.startswith("|")]
    check(lines[:len(table)] == table, f"the table comes first: {out!r}")
    check(all(not ln or re.match(r"mm\d+ \(|build: ", ln) for ln in lines[len(table):]), f"after the table: {out!r}")
    cells = [[c.strip() for c in ln.split("|")[1:-1]] for ln in table]
    check(len(cells) >= 2 and cells[0] == MD_HEAD, f"header {cells[:1]}")
    check(all(re.fullmatch(r"-+:?", c) for c in cells[1]) and len(cells[1]) == len(MD_HEAD), f"alignment {table[1]!r}")
    check(all(len(r) == len(MD_HEAD) for r in cells[2:]), f"ragged table: {out!r}")
    for r in cells[2:]:
        check(re.fullmatch(r"\d+\.\d\d ± \d+\.\d\d", r[8]) and float(r[8].split()[0]) > 0, f"t/s {r}")
    return [dict(zip(MD_HEAD, r)) for r in cells[2:]]


def run_pty_stderr(args, timeout=240):
    """Runs with stderr on a pseudo-terminal (where progress redraws one
    line) and stdout on a pipe: (exit status, stdout, stderr)."""
    master, slave = os.openpty()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    err, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([master], [], [], 0.2)[0]:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the child closed the terminal
                chunk = b""
            if not chunk and p.poll() is not None:
                break
            err += chunk
        elif p.poll() is not None:
            break
    os.close(master)
    out = p.communicate(timeout=max(1, deadline - time.monotonic()))[0]
    return p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def case_bench_lists(ctx):
    smol = ctx.model(SMOL)
    # The cross product, in llama-bench's order: each thread count, each pp, then each tg.
    rc, out, err = run_pty_stderr([ctx.bin, "bench", "-m", smol, "-p", "8,16", "-n", "2,3", "-t", "1,2", "-r", "1",
                                   "--no-warmup"])
    check(rc == 0, f"bench lists: {rc} {err!r}")
    rows = md_table(out)
    check([r["threads"] for r in rows] == ["1"] * 4 + ["2"] * 4, f"threads column {[r['threads'] for r in rows]}")
    check([r["test"] for r in rows] == ["pp8", "pp16", "tg2", "tg3"] * 2, f"test column {[r['test'] for r in rows]}")
    check(all(r["kv"] == "full" and float(r["kv MiB"]) > 0 and r["backend"].startswith("CPU") for r in rows),
          f"kv and backend columns {rows}")
    # Progress: on the terminal (stderr) as one redrawn line, never on stdout.
    check(re.search(r"kvfold: bench: \d+/8 tests", err) and "\r" in err, f"no progress line on stderr: {err!r}")
    check("kvfold:" not in out and "\r" not in out and "\033" not in out, f"progress on stdout: {out!r}")

    base = ["bench", "-m", smol, "-p", "8", "-n", "2", "-t", "1", "-r", "1", "--no-warmup"]
    # -o json: one object per test, with the numbers.
    rc, out, err = ctx.run(*base, "-o", "json")
    check(rc == 0, f"-o json: {err}")
    arr = json.loads(out)
    check(isinstance(arr, list) and [t["name"] for t in arr] == ["pp8", "tg2"], f"-o json {out}")
    for t in arr:
        check(t["n_threads"] == 1 and t["policy"] == "full" and t["tok_per_s"] > 0 and t["kv_bytes"] > 0
              and t["n_params"] > 0 and t["model"], f"-o json test {t}")
    check((arr[0]["n_prompt"], arr[0]["n_gen"], arr[1]["n_prompt"], arr[1]["n_gen"]) == (8, 0, 0, 2), f"{arr}")
    # -o csv: a header and a line per test, as the csv module reads it.
    rc, out, err = ctx.run(*base, "-o", "csv")
    check(rc == 0, f"-o csv: {err}")
    recs = list(csv.DictReader(io.StringIO(out)))
    check([r["name"] for r in recs] == ["pp8", "tg2"] and all(float(r["tok_per_s"]) > 0 for r in recs)
          and all(r["n_threads"] == "1" and r["policy"] == "full" for r in recs), f"-o csv {out!r}")
    # -o md is the default; --json is still the one-object report.
    rc, out, err = ctx.run(*base, "-o", "md")
    check(rc == 0 and [r["test"] for r in md_table(out)] == ["pp8", "tg2"], f"-o md: {err}")
    rc, out, err = ctx.run(*base, "--json")
    o = json.loads(out)
    check(rc == 0 and [t["name"] for t in o["tests"]] == ["pp8", "tg2"] and o["interrupted"] is False
          and o["peak_rss_bytes"] > 0, f"--json: {out} {err}")
    check("kvfold:" not in out, "a short run: stdout holds only the report")

    # --kv twice: a set of rows each, tg after each -p prompt compressed by the policy.
    rc, out, err = ctx.run("bench", "-m", smol, "-p", "32", "-n", "2", "-t", "1", "-r", "1", "--no-warmup",
                           "--kv", "knorm:budget=0.25", "--kv", "full", "-o", "json")
    check(rc == 0, f"--kv twice: {err}")
    arr = json.loads(out)
    check([(t["policy"], t["name"]) for t in arr] == [("knorm:budget=0.25", "pp32"), ("knorm:budget=0.25", "tg2@32"),
                                                      ("full", "pp32"), ("full", "tg2@32")], f"--kv twice {arr}")
    knorm, full = arr[1]["kv"], arr[3]["kv"]
    check(knorm["bytes_kept"] < 0.5 * knorm["bytes_full"] and full["bytes_kept"] == full["bytes_full"],
          f"KV kept: knorm {knorm['bytes_kept']}/{knorm['bytes_full']}, full {full['bytes_kept']}/{full['bytes_full']}")
    rc, out, err = ctx.run("bench", "-m", smol, "-p", "32", "-n", "2", "-t", "1", "-r", "1", "--no-warmup",
                           "--kv", "knorm:budget=0.25", "--kv", "full")
    rows = md_table(out)
    check(rc == 0 and [r["kv"] for r in rows] == ["knorm:budget=0.25"] * 2 + ["full"] * 2
          and float(rows[1]["kv MiB"]) < float(rows[3]["kv MiB"]), f"md kv column: {out!r}")


def case_bench_errors(ctx):
    m = os.path.join(ctx.tmp, "never-opened.gguf")  # usage errors come before any file access
    for args, what in [
        (("-p", "16,,32"), "empty item"),
        (("-p", "a"), "not a number"),
        (("-p", "16,"), "trailing comma"),
        (("-n", ",4"), "leading comma"),
        (("-n", "4;8"), "bad separator"),
        (("-t", "1,2000"), "threads out of range"),
        (("-d", "-1"), "negative depth"),
        (("-p", "2000000"), "prompt out of range"),
        (("-p", ",".join(["8"] * 33)), "too many values"),
        (("-o", "xml"), "unknown format"),
        (("-o", "csv", "--json"), "two formats"),
        (("--kv", "full", "--kv", "snapkv:window=x"), "a bad second --kv"),
        (("-p", "0,0", "-n", "0"), "nothing to run"),
    ]:
        line = expect_error(ctx, 1, ["bench", "-m", m, *args], what)
        check(args[1] in line or what in ("two formats", "a bad second --kv", "nothing to run"),
              f"{what}: the message names the value: {line}")


def case_bench_interrupt(ctx):
    smol = ctx.model(SMOL)
    # Ctrl-C once the first of 8 tests is done: the table of that one, exit status 130.
    n = 8
    pp = ["-p", ",".join(["16"] * n), "-n", "0", "-t", "1", "-r", "1", "--no-warmup"]
    rc, out, err = interrupt_at([ctx.bin, "bench", "-m", smol, *pp], "bench:1")
    check(rc == 130, f"bench after Ctrl-C: exit {rc}, want 130: {err!r}")
    rows = md_table(out)
    check(len(rows) == 1 and rows[0]["test"] == "pp16", f"{len(rows)} rows after Ctrl-C: {out!r}")
    check(re.search(rf"interrupted after 1 of {n} tests", err), f"stderr says so: {err!r}")
    rc, out, err = interrupt_at([ctx.bin, "bench", "-m", smol, *pp, "--json"], "bench:2")
    o = json.loads(out)
    check(rc == 130 and o["interrupted"] is True and len(o["tests"]) == 2, f"bench --json after Ctrl-C: {rc} {out}")

    # perplexity: the PPL of the chunks scored so far.
    args = [ctx.bin, "perplexity", "-m", smol, "-f", PASSAGE, "-c", "64", "-t", "1", "--chunks", "5"]
    rc, out, err = interrupt_at(args + ["--json"], "perplexity:2")
    o = json.loads(out)
    check(rc == 130 and o["interrupted"] is True and o["n_chunks"] == len(o["running_ppl"]) == 2
          and o["n_scored"] == 32 * o["n_chunks"] and math.isfinite(o["ppl"]) and o["ppl"] > 1,
          f"perplexity --json after Ctrl-C: {rc} {out} {err!r}")
    rc, out, err = interrupt_at(args, "perplexity:1")
    last = out.strip().splitlines()[-1]
    check(rc == 130 and re.match(r"PPL = \d+\.\d+ \+/- \d+\.\d+ .*, interrupted after 1 of 5 chunks$", last),
          f"perplexity after Ctrl-C: {rc} {out!r} {err!r}")
    # A run to the end says nothing of it, and its progress stays off stdout.
    rc, out, err = run_pty_stderr(args[:-2] + ["--chunks", "3", "--json"])
    o = json.loads(out)
    check(rc == 0 and o["interrupted"] is False and o["n_chunks"] == 3, f"perplexity --json: {rc} {out} {err!r}")
    check("kvfold: perplexity: " in err and "chunks" in err, f"no progress line on stderr: {err!r}")


def case_bench_spin(ctx):
    """OpenMP's idle threads: kvfold sets GOMP_SPINCOUNT=3000 before libgomp
    reads its environment unless the user set it or OMP_WAIT_POLICY."""
    smol = ctx.model(SMOL)
    base = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    for extra, spin, policy in [({}, "3000", None), ({"GOMP_SPINCOUNT": "7"}, "7", None),
                                ({"OMP_WAIT_POLICY": "passive"}, None, "passive")]:
        p = subprocess.run([ctx.bin, "bench", "-m", smol, "-p", "8", "-n", "0", "-r", "1", "--no-warmup", "-t", "1",
                            "--json"], capture_output=True, timeout=240, env=dict(base, **extra))
        check(p.returncode == 0, f"bench with {extra}: exit {p.returncode}: {p.stderr.decode()[-300:]}")
        o = json.loads(p.stdout)
        check(o["gomp_spincount"] == spin and o["omp_wait_policy"] == policy,
              f"with {extra}: gomp_spincount {o['gomp_spincount']!r}, omp_wait_policy {o['omp_wait_policy']!r}")


def case_bench_blas(ctx):
    """OpenBLAS's kernels: where an OpenBLAS older than the CPU fell back to
    pre-AVX2 ones on a CPU with AVX2 and FMA, kvfold names the CPU's (SkylakeX
    with AVX-512, else Haswell); a user's OPENBLAS_CORETYPE wins (tried only
    where the CPU can run Haswell's kernels)."""
    smol = ctx.model(SMOL)
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    fallbacks = {"prescott", "core2", "penryn", "dunnington", "nehalem", "sandybridge"}
    base = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    avx2 = {"avx2", "fma"} <= flags
    for extra in [{}, {"OPENBLAS_CORETYPE": "Haswell"}] if avx2 else [{}]:
        p = subprocess.run([ctx.bin, "bench", "-m", smol, "-p", "8", "-n", "0", "-r", "1", "--no-warmup", "-t", "1",
                            "--json"], capture_output=True, timeout=240, env=dict(base, **extra))
        check(p.returncode == 0, f"bench with {extra}: exit {p.returncode}: {p.stderr.decode()[-300:]}")
        core = json.loads(p.stdout)["openblas_core"]
        if extra:
            check(core == "Haswell", f"OPENBLAS_CORETYPE=Haswell ran {core!r}")
        elif avx2:
            check(core.lower() not in fallbacks, f"an AVX2 CPU ran OpenBLAS's {core!r} kernels")


def case_bench_kernels(ctx):
    """The decoding kernels chosen for this CPU (model/kernels.c) and the
    memory bandwidth: KVFOLD_KERNELS=measure,scalar times every candidate
    (the scalar one too, so that there is a choice on any CPU) and writes
    kernels.tsv under KVFOLD_CACHE_DIR; a later load reads the choice back;
    a hostile cache file is a miss, never an error; --bandwidth states each
    decode test as a share of the measured read bandwidth."""
    smol = ctx.model(SMOL)
    cache = os.path.join(ctx.tmp, "cache")
    tsv = os.path.join(cache, "kernels.tsv")
    if os.path.exists(tsv):
        os.remove(tsv)
    args = [ctx.bin, "bench", "-m", smol, "-p", "0", "-n", "2", "-r", "1", "--no-warmup", "-t", "1"]

    def bench(mode, *extra):
        env = {k: v for k, v in os.environ.items() if k != "KVFOLD_KERNELS"}
        env["KVFOLD_CACHE_DIR"] = cache
        if mode:
            env["KVFOLD_KERNELS"] = mode
        p = subprocess.run(args + list(extra), capture_output=True, timeout=240, env=env)
        check(p.returncode == 0, f"bench with KVFOLD_KERNELS={mode}: exit {p.returncode}: {p.stderr.decode()[-300:]}")
        return p.stdout.decode()

    def kernels(out):
        k = json.loads(out)["kernels"]
        parts = dict(part.split(": ", 1) for part in k.split("; "))
        check(set(parts) == {"q4_1", "q8_0"}, f"SmolLM2's decoding types: {k!r}")
        return parts

    measured = kernels(bench("measure,scalar", "--json"))
    for t, why in measured.items():
        check("measured at load" in why and re.search(r"rows-scalar [\d.]+ GB/s", why) and
              re.search(r"rows-[a-z0-9]+-nopf [\d.]+ GB/s", why) or not re.search(r"rows-avx", why),
              f"{t}: every candidate timed, each SIMD one with and without its prefetch: {why!r}")
    with open(tsv) as f:
        lines = f.read().splitlines()
    check(len(lines) == 2 and all(len(ln.split("\t")) >= 8 for ln in lines), f"kernels.tsv: {lines}")
    again = kernels(bench("scalar", "--json"))
    for t, why in again.items():
        check(why.split(" ")[0] == measured[t].split(" ")[0] and "chosen before on this CPU" in why,
              f"{t}: read back: {why!r} after {measured[t]!r}")
    fixed = kernels(bench("fixed", "--json"))
    check(all("KVFOLD_KERNELS=fixed" in w or "the only one" in w for w in fixed.values()), f"fixed: {fixed}")
    # Not a regular file (a FIFO would hang a reader): no cache, so no measuring either.
    os.remove(tsv)
    os.mkfifo(tsv)
    nocache = kernels(bench("scalar", "--json"))
    check(all("no cache file" in w for w in nocache.values()), f"a FIFO as the cache: {nocache}")
    os.remove(tsv)
    with open(tsv, "w") as f:
        f.write("\n".join(lines) + "\n")

    # Hostile cache lines: the right key with an unknown kernel, garbage,
    # an over-long line holding a key, bytes that are not text.
    key = lines[0].split("\t")
    with open(tsv, "wb") as f:
        f.write(("\t".join(key[:5]) + "\trows-bogus\n").encode())
        f.write(b"x" * 5000 + ("\t".join(key[:5]) + "\trows-avx2\n").encode())
        f.write(b"\xff\x00\tq4_1\n\n\t\t\t\n")
    hostile = kernels(bench("scalar", "--json"))
    check(all("measured at load" in w for w in hostile.values()), f"a hostile line read as a choice: {hostile}")

    out = bench(None, "--bandwidth", "--explain", "-t", "1,2", "--json")
    o = json.loads(out)
    check(set(o["read_gbps"]) == {"1", "2"} and all(v > 0 for v in o["read_gbps"].values()), f"read_gbps {o}")
    check(o["decode_bytes"] > 0 and o["decode_bytes"] < o["weight_bytes"] + 1, f"decode_bytes {o['decode_bytes']}")
    tg = [t for t in o["tests"] if t["n_gen"]]
    check(len(tg) == 2 and all(t["bandwidth_share"] > 0 and t["decode_bytes_per_s"] > 0 for t in tg), f"tests {tg}")
    md = bench(None, "--bandwidth", "--explain")
    check(re.search(r"^memory read bandwidth, 1 thread: \d+\.\d GB/s$", md, re.M) and
          re.search(r"^tg2 \(threads 1\): weights streamed at [\d.]+ GB/s \(\d+ MB a token\), \d+% of the read "
                    r"bandwidth$", md, re.M) and re.search(r"^kernels: q4_1: ", md, re.M), f"markdown notes: {md!r}")


def main():
    if len(sys.argv) < 6:
        print(__doc__, file=sys.stderr)
        return 2
    cases = {"bench_lists": case_bench_lists, "bench_errors": case_bench_errors,
             "bench_interrupt": case_bench_interrupt, "bench_spin": case_bench_spin, "bench_blas": case_bench_blas,
             "bench_kernels": case_bench_kernels}
    return run_case(cases, sys.argv[1], Ctx(*sys.argv[2:6]))


if __name__ == "__main__":
    sys.exit(main())
