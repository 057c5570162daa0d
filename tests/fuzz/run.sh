#!/usr/bin/env bash
# Runs libFuzzer harnesses of a KVF_FUZZ build one after the other, each for
# SECONDS, niced, on a persistent corpus (BUILD/tests/fuzz/corpus/<kind>)
# grown from the seeds and the regression inputs. Crashes, timeouts and
# out-of-memory inputs land in BUILD/tests/fuzz/findings/<kind>/; each run's
# log in BUILD/tests/fuzz/logs/<kind>.log. Exits 1 when any harness found something.
#
# usage: run.sh BUILD SECONDS KIND...
set -u
build=$1 seconds=$2
shift 2
src=$(cd "$(dirname "$0")" && pwd)
out=$build/tests/fuzz
status=0
rss=$(sed -n 's/^#define FUZZ_RSS_LIMIT_MB \([0-9]*\).*/\1/p' "$src/fuzz.h")
for kind in "$@"; do
    mkdir -p "$out/corpus/$kind" "$out/findings/$kind" "$out/logs"
    inputs=("$out/seeds/$kind")
    [ -d "$src/regress/$kind" ] && inputs+=("$src/regress/$kind")
    log=$out/logs/$kind.log
    # -timeout / -rss_limit_mb: a small input taking seconds or gigabytes is a
    # finding (FUZZ_TIMEOUT raises the limit for runs on a busy machine, where a
    # niced harness can wait seconds for a core); -close_fd_mask=3: the
    # library's error messages would flood the log (libFuzzer and the
    # sanitizers still report on their own descriptor).
    OMP_NUM_THREADS=1 nice -n 19 "$out/fuzz_$kind" -max_total_time="$seconds" -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb="$rss" \
        -close_fd_mask=3 -print_final_stats=1 -artifact_prefix="$out/findings/$kind/" \
        "$out/corpus/$kind" "${inputs[@]}" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    last=$(grep -E '^#[0-9]+' "$log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+')
    printf '%-12s %s s, %s executions (%s/s), %s, exit %d\n' "$kind" "$seconds" "${execs:-?}" "${speed:-?}" \
        "${last:-?}" "$rc"
    if [ "$rc" -ne 0 ]; then
        status=1
        grep -E '^(==[0-9]+==ERROR|SUMMARY|artifact_prefix|Test unit written)' "$log" | head -5
    fi
done
exit $status
