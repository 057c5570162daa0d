# KV cache storage types: F16 and Q8_0 caches against the float32 cache on
# the logits of a prompt (blocked attention) and of decode steps (typed row
# kernels), with the top token compared at every prompt position and the KV
# bytes checked against the type's row size (tests/tools/kv_type.c).
# Arguments: N_PROMPT N_DECODE F16_TOL F16_TOP1 Q8_TOL Q8_TOP1 DECODE_TOL, the
# tolerances relative to each position's largest f32 logit. Measured
# (prompt / decode): llama-f32 f16 4e-4 / 4e-4 (q8_0 refused: head_dim 16);
# gemma3-f32 (sliding window) f16 6e-4 / 6e-4, q8_0 0.014 / 0.014;
# SmolLM2 f16 1.1e-3 / 0.04, q8_0 0.03 / 0.044 (decode steps there go
# through Q8 activations of the quantised weights, hence DECODE_TOL).
add_test(NAME kv_type_llama
         COMMAND kv_type ${CMAKE_BINARY_DIR}/fixtures/llama-f32.gguf ${CMAKE_SOURCE_DIR}/tests/data/ppl_passage.txt
                 200 16 2e-3 0.99 0.05 0.97 0)
add_test(NAME kv_type_gemma3
         COMMAND kv_type ${CMAKE_BINARY_DIR}/fixtures/gemma3-f32.gguf ${CMAKE_SOURCE_DIR}/tests/data/ppl_passage.txt
                 200 16 2e-3 0.99 0.05 0.97 0)
set_tests_properties(kv_type_llama kv_type_gemma3 PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 120)
add_test(NAME kv_type_real
         COMMAND kv_type ${KVF_MODELS_DIR}/smollm2-135m-instruct-q4_1.gguf ${CMAKE_SOURCE_DIR}/tests/data/ppl_passage.txt
                 600 16 5e-3 0.99 0.08 0.97 0.1)
set_tests_properties(kv_type_real PROPERTIES LABELS "integration;real" TIMEOUT 600 SKIP_RETURN_CODE 77)
add_test(NAME kv_type_cli COMMAND ${KVF_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/kv_type_cli.py $<TARGET_FILE:kvfold_cli>
                                  ${CMAKE_BINARY_DIR}/fixtures ${CMAKE_SOURCE_DIR}/tests/data/ppl_passage.txt)
set_tests_properties(kv_type_cli PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 120)
