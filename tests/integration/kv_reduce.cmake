# The reduce stage (LightKV, ToMe, FastV inside the decoder) end to end:
# per-layer vision entry counts against LightKV's eq. 9 (docs/METHODS.md §5.6.3) on SmolLM2 with
# pseudo-images, logits with nothing reduced against the full cache on the
# tiny LLaVA fixture (tests/tools/kv_reduce.c).
add_test(NAME kv_reduce
         COMMAND kv_reduce ${KVF_MODELS_DIR}/smollm2-135m-instruct-q4_1.gguf
                 ${CMAKE_BINARY_DIR}/fixtures/llava-f32.gguf ${CMAKE_BINARY_DIR}/fixtures/llava-mmproj-f32.gguf)
set_tests_properties(kv_reduce PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS "integration;real" TIMEOUT 300
                     SKIP_RETURN_CODE 77)
