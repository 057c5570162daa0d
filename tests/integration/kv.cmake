# KV cache policies: the entries each method keeps after compressing a
# fixture prompt, against a brute-force numpy reference built from the full
# attention matrices (tests/ref/ref_kv.py), with the kept count per head; for
# the merging methods (lookm, elastic) the kept entry each evicted one went
# into, for prefixkv the searched layer budgets and their Gini coefficients.
add_test(NAME kv_ref COMMAND ${KVF_PYTHON} ${CMAKE_SOURCE_DIR}/tests/ref/ref_kv.py $<TARGET_FILE:kvfold_cli>
                             ${CMAKE_BINARY_DIR}/fixtures)
set_tests_properties(kv_ref PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 300)

# One prefill, many policies (kvf_session_fork): on the tiny LLaVA fixture
# with two images and a 3-frame video, every policy forked from one gathering session must give
# what a session of its own gives, bit for bit (bytes, kept tags, merges,
# layer budgets, logits through 5 decode steps); forks that could not are
# refused (tests/tools/kv_fork.c).
add_test(NAME kv_fork COMMAND kv_fork ${CMAKE_BINARY_DIR}/fixtures/llava-f32.gguf
                              ${CMAKE_BINARY_DIR}/fixtures/llava-mmproj-f32.gguf)
set_tests_properties(kv_fork PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 120)

# Session files (kvf_session_save / kvf_session_load): on the same fixture,
# every kind of policy state saved after the prompt and after compression and
# decoding, loaded, goes on bit for bit as the original through 5 steps (F32,
# F16); files cut short, with a bit flipped, with words overwritten under a
# right checksum, and another model's (the Gemma 3 fixture) are refused with
# a clear error or load into a session that decodes (tests/tools/session_file.c).
add_test(NAME session_file COMMAND session_file ${CMAKE_BINARY_DIR}/fixtures/llava-f32.gguf
                                   ${CMAKE_BINARY_DIR}/fixtures/llava-mmproj-f32.gguf
                                   ${CMAKE_BINARY_DIR}/fixtures/gemma3-f32.gguf)
set_tests_properties(session_file PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 120)

# Many sessions decoded together (kvf_session_decode_batch): every policy on
# the tiny LLaVA fixture decoded in one batch equals decoding alone, bit for
# bit, for 6 steps; 66 rows (through BLAS) within 1e-4 of the largest logit;
# bad arguments and a full session refused (tests/tools/decode_batch.c).
add_test(NAME decode_batch COMMAND decode_batch ${CMAKE_BINARY_DIR}/fixtures/llava-f32.gguf
                                   ${CMAKE_BINARY_DIR}/fixtures/llava-mmproj-f32.gguf)
set_tests_properties(decode_batch PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 120)

# A prompt prefilled in parts (kvf_session_prefill_prompt_part, parts of 5
# positions cutting through both images of the tiny LLaVA fixture) equals the
# prompt prefilled whole, bit for bit with one row per pass, through
# compression and decoding; whole-prompt policies and misordered parts are
# refused (tests/tools/prefill_parts.c).
add_test(NAME prefill_parts COMMAND prefill_parts ${CMAKE_BINARY_DIR}/fixtures/llava-f32.gguf
                                    ${CMAKE_BINARY_DIR}/fixtures/llava-mmproj-f32.gguf)
set_tests_properties(prefill_parts PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 120)

# Sliding-window layers free what left their window: on the gemma3 fixture
# (window 4) and the real Gemma 3 270M (window 512), against sessions that
# keep every entry (kv_swa_full): the same logits bit for bit after the
# prompt and through decoding (alone and batched), windowed heads holding
# their window plus at most 32 entries, exactly their window after
# compression; truncation below what the window lost refused; policies'
# budgets over the window (tests/tools/kv_swa.c).
add_test(NAME kv_swa COMMAND kv_swa ${CMAKE_BINARY_DIR}/fixtures/gemma3-f32.gguf
                             ${CMAKE_SOURCE_DIR}/tests/data/ppl_passage.txt 150 7)
set_tests_properties(kv_swa PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 120)
add_test(NAME kv_swa_real COMMAND kv_swa ${KVF_MODELS_DIR}/gemma3-270m-q4_k_m.gguf
                                  ${CMAKE_SOURCE_DIR}/tests/data/ppl_passage.txt 1300 256)
set_tests_properties(kv_swa_real PROPERTIES LABELS "integration;real" TIMEOUT 600 SKIP_RETURN_CODE 77)
