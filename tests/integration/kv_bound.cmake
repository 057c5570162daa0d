# The decode-time memory bound of every KV policy on a long prompt (about 1500
# positions: text around a 576-token pseudo-image) on the real SmolLM2,
# checked by counting entries through the inspection API after every step
# (tests/tools/kv_bound.c). About 80-130 s on the 2-core machines beside the
# rest of the suite; the limit is a hang detector that a machine five times
# slower stays under.
add_test(NAME kv_bound_real
         COMMAND kv_bound ${KVF_MODELS_DIR}/smollm2-135m-instruct-q4_1.gguf
                 ${CMAKE_SOURCE_DIR}/tests/data/ppl_passage.txt 1000 16)
set_tests_properties(kv_bound_real PROPERTIES LABELS "integration;real" TIMEOUT 1200 SKIP_RETURN_CODE 77)
