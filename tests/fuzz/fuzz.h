/* What the fuzz harnesses of tests/fuzz/ share (fuzz_util.c). Each
 * fuzz_<kind>.c defines LLVMFuzzerTestOneInput; it is linked either with
 * libFuzzer (`make fuzz`, KVF_FUZZ=ON) or with replay.c, which runs it over
 * files (the ctest fuzz_<kind> replays the seed corpus and the regressions).
 * A harness must never exit or leak: libFuzzer runs it millions of times in
 * one process, so any state kept between inputs is built once, on the first. */
#ifndef KVF_FUZZ_H
#define KVF_FUZZ_H

#include "kvfold.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The memory an input may take: `make fuzz` runs libFuzzer with
 * -rss_limit_mb at this (which also fails any single allocation above it);
 * the replay fails an input past it in resident memory, and the sanitizer
 * build's replay any allocation above it (ASAN_OPTIONS, tests/fuzz/CMakeLists.txt).
 * run.sh and the CMake file read the number from this line. */
#define FUZZ_RSS_LIMIT_MB 2048

/* A fixture of tests/tools/make_fixture (KVF_FUZZ_FIXTURES in the
 * environment, else the folder the build wrote them to) loaded with one
 * thread, for the harness to keep; mmproj NULL: none. Aborts when it cannot
 * be loaded: a harness without its fixture tests nothing. */
const struct kvf_model *fuzz_fixed_model(const char *name, const char *mmproj, bool vocab_only);
/* path (of at least FUZZ_PATH_MAX bytes) gets the path of fixture `name`. */
#define FUZZ_PATH_MAX 4096
void fuzz_fixture_path(const char *name, char *path);

/* The bytes as a file without touching the disk (memfd): *path gets
 * "/proc/self/fd/N". Returns the descriptor to close, or -1. */
int fuzz_memfd(const uint8_t *data, size_t size, char path[64]);
/* A private temporary folder of this process, emptied (recursively) on each
 * call and removed at exit. */
const char *fuzz_scratch_dir(void);
/* Whether s[0..n) may name a file of a scratch folder: 1 to FUZZ_NAME_MAX
 * of [A-Za-z0-9._-], not starting with '.' (nothing outside the folder). */
#define FUZZ_NAME_MAX 64
bool fuzz_name_ok(const uint8_t *s, size_t n);
/* Writes size bytes to dir/name; false when it cannot. */
bool fuzz_write_file(const char *dir, const char *name, const void *data, size_t size);

/* Reads every cached entry's tag, every merge record and every layer
 * budget of s, so that ASan sees one a policy (or a loaded file) left
 * dangling or short. */
void fuzz_read_cache(const struct kvf_session *s, const struct kvf_model_info *info);
/* The greedy choice among logits[0..n); 0 without logits (NULL). */
int32_t fuzz_argmax(const float *logits, int n);

/* What a loaded model offers, each tried once: its chat template and
 * tokenizer on a short text, a session prefilling a few tokens and decoding one, and its
 * vision tower (when it has one) on a small picture. Every failure is an
 * answer, not a finding; only the sanitizers judge. */
void fuzz_exercise_model(const struct kvf_model *m);

#endif
