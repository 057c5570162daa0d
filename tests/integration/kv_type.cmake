# KV cache storage types against the float32 cache on the logits of a
# prompt (blocked attention) and of decode steps (typed row kernels), with
# the top token compared at every prompt position and the KV bytes checked
# against the types' row sizes (tests/tools/kv_type.c). Arguments: N_PROMPT
# N_DECODE DECODE_TOL, then CASE=TOL:TOP1 for each type (KTYPE/VTYPE: keys
# and values apart), TOL relative to each position's largest f32 logit.
# Measured (prompt / decode, top-1 share):
#   llama-f32 f16 4e-4 / 2e-4 (block types refused: head_dim 16);
#   gemma3-f32 (sliding window) f16 6e-4 / 2e-4, q8_0 0.014 / 0.005, q4_0
#     0.21 / 0.08 (0.935), q4_0h 0.21 / 0.08 (0.925), q8_0/q4_0 0.17 / 0.06
#     (0.965);
#   SmolLM2 f16 1.1e-3 / 0.035, q8_0 0.03 / 0.04 (0.983), q4_0 0.44 / 0.21
#     (0.807), q4_0h 0.27 / 0.15 (0.885), q8_0/q4_0 0.30 / 0.09 (0.955),
#     q8_0/q4_0h 0.18 / 0.05 (0.950), q4_0s/q4_0h 0.37 / 0.13 (0.897):
#     SmolLM2's keys have outlier channels, which 4-bit blocks of 32
#     quantise coarsely unless rotated or smoothed (decode steps go through
#     Q8 activations of the quantised weights, hence DECODE_TOL); gemma3-f32
#     q4_0s/q4_0h 0.25 / 0.07 (0.945).
# The fixtures' weights are random, with no outliers for the rotation to
# spread, so their 4-bit errors say little of a real model's; SmolLM2's are
# the measure.
set(KVF_KV_TYPE_CASES f16=2e-3:0.99 q8_0=0.05:0.97 q4_0=0.3:0.9 q4_0h=0.3:0.9 q8_0/q4_0=0.25:0.93 q4_0s/q4_0h=0.3:0.9)
add_test(NAME kv_type_llama
         COMMAND kv_type ${CMAKE_BINARY_DIR}/fixtures/llama-f32.gguf ${CMAKE_SOURCE_DIR}/tests/data/ppl_passage.txt
                 200 16 0 ${KVF_KV_TYPE_CASES})
add_test(NAME kv_type_gemma3
         COMMAND kv_type ${CMAKE_BINARY_DIR}/fixtures/gemma3-f32.gguf ${CMAKE_SOURCE_DIR}/tests/data/ppl_passage.txt
                 200 16 0 ${KVF_KV_TYPE_CASES})
set_tests_properties(kv_type_llama kv_type_gemma3 PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 120)
add_test(NAME kv_type_real
         COMMAND kv_type ${KVF_MODELS_DIR}/smollm2-135m-instruct-q4_1.gguf ${CMAKE_SOURCE_DIR}/tests/data/ppl_passage.txt
                 600 16 0.1 f16=5e-3:0.99 q8_0=0.08:0.97 q4_0=0.6:0.75 q4_0h=0.4:0.85 q8_0/q4_0=0.4:0.92
                 q8_0/q4_0h=0.3:0.92 q4_0s/q4_0h=0.45:0.87)
set_tests_properties(kv_type_real PROPERTIES LABELS "integration;real" TIMEOUT 600 SKIP_RETURN_CODE 77)
add_test(NAME kv_type_cli COMMAND ${KVF_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/kv_type_cli.py $<TARGET_FILE:kvfold_cli>
                                  ${CMAKE_BINARY_DIR}/fixtures ${CMAKE_SOURCE_DIR}/tests/data/ppl_passage.txt)
set_tests_properties(kv_type_cli PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 120)
