#!/usr/bin/env bash
# kvfold against llama.cpp on the same GGUF files and thread counts, runs
# interleaved (kvfold, then llama.cpp, for each test): pp512 and tg128 at
# each thread count, then tg32 after a 4096-token context at the last one.
# llama.cpp comes from PyPI (the llama-cpp-python source package vendors it;
# this machine reaches no other network) and is built once into CACHE_DIR
# (CPU backend, -march=native, OpenMP) with llama-bench, and llama-server
# and llama-perplexity for bench/llama_cpp_ruler.py and perplexity
# neighbours; its commit is printed first.
#
# With KV_TYPES="f16 q4_0 ..." (each a type, or KTYPE/VTYPE) the depth test
# runs again for each cache type, both engines given -ctk and -ctv (and
# llama.cpp flash attention, which its quantised V cache needs); a type
# llama.cpp lacks (q4_0h, q4_0s) runs kvfold's alone.
#
# usage: [KV_TYPES=...] bench/llama_cpp.sh KVFOLD CACHE_DIR "THREADS" MODEL...
#   e.g. bench/llama_cpp.sh build/kvfold /tmp/lcpp "1 2" models/smollm2-135m-instruct-q4_1.gguf \
#        models/gemma3-270m-q4_k_m.gguf
set -euo pipefail
kvfold=$1 cache=$2 threads=$3
shift 3
version=0.3.36
src=$cache/llama_cpp_python-$version/vendor/llama.cpp
bench=$src/build/bin/llama-bench
if [ ! -x "$bench" ] || [ ! -x "$src/build/bin/llama-server" ] || [ ! -x "$src/build/bin/llama-perplexity" ]; then
  mkdir -p "$cache"
  if [ ! -d "$src" ]; then
    python3 -m pip download "llama-cpp-python==$version" --no-deps --no-binary :all: -d "$cache" >&2
    tar xzf "$cache/llama_cpp_python-$version.tar.gz" -C "$cache"
  fi
  cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_OPENMP=ON -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF >&2
  cmake --build "$src/build" -j "$(nproc)" --target llama-bench llama-server llama-perplexity >&2
fi
echo "llama.cpp $(sed -n 's/.*LLAMA_COMMIT = "\(.*\)";/\1/p' "$src/build/common/build-info.cpp") (llama-cpp-python $version)"

# One test of each engine: "name tok/s" lines.
kv() { "$kvfold" bench -m "$1" "${@:2}" -r 2 --json 2>/dev/null |
       python3 -c 'import json,sys; [print(t["name"], round(t["tok_per_s"], 1)) for t in json.load(sys.stdin)["tests"]]'; }
ll() { "$bench" -m "$1" "${@:2}" -r 2 -o json 2>/dev/null |
       python3 -c 'import json,sys
for t in json.load(sys.stdin):
    name = "pp%d" % t["n_prompt"] if t["n_prompt"] else "tg%d" % t["n_gen"] + ("@%d" % t["n_depth"] if t.get("n_depth") else "")
    print(name, round(t["avg_ts"], 1))'; }

llama_types=" f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 "
echo "| model | threads | test | kvfold tok/s | llama.cpp tok/s | ratio |"
echo "|---|---|---|---|---|---|"
row() { # model threads kvfold-lines llama-lines
  paste -d' ' <(echo "$3") <(echo "$4") | while read -r name a _ b; do
    echo "| $(basename "$1") | $2 | $name | $a | $b | $(python3 -c "print(f'{$a / $b:.2f}')") |"
  done
}
for model in "$@"; do
  last=
  for t in $threads; do
    row "$model" "$t" "$(kv "$model" -p 512 -n 128 -t "$t")" "$(ll "$model" -p 512 -n 128 -t "$t")"
    last=$t
  done
  row "$model" "$last" "$(kv "$model" -p 0 -n 32 -d 4096 -t "$last")" "$(ll "$model" -p 0 -n 32 -d 4096 -t "$last")"
  for types in ${KV_TYPES:-}; do
    k=${types%/*} v=${types#*/}
    a=$(kv "$model" -p 0 -n 32 -d 4096 -t "$last" -ctk "$k" -ctv "$v" | awk -v t="$types" '{print $1 "," t, $2}')
    if [[ "$llama_types" == *" $k "* && "$llama_types" == *" $v "* ]]; then
      row "$model" "$last" "$a" "$(ll "$model" -p 0 -n 32 -d 4096 -t "$last" -ctk "$k" -ctv "$v" -fa on)"
    else
      echo "$a" | while read -r name tps; do echo "| $(basename "$model") | $last | $name | $tps | - | - |"; done
    fi
  done
done
