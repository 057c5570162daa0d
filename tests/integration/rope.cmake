# Model files read exactly. RoPE scaling (linear, llama3, YaRN; Gemma 3's on
# its global layers only) against transformers on the tiny fixtures, through
# config.json and through llama.cpp's GGUF keys or rope_freqs.weight, at
# positions past the original context (tests/ref/hf_rope_check.py; needs
# .venv-hf, skips without it). And every key that changes the arithmetic
# and that kvfold does not implement, and every tensor its decoder does not
# use, refused by name when planted into a fixture (model_keys_check.py).
add_test(NAME hf_rope COMMAND ${KVF_HF_PYTHON} ${KVF_REF_DIR}/hf_rope_check.py
         --dump $<TARGET_FILE:dump_logits> ${KVF_FIXTURE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/hf_rope_tmp)
set_tests_properties(hf_rope PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 300
                     SKIP_RETURN_CODE 77)
add_test(NAME model_keys COMMAND ${KVF_PYTHON} ${KVF_REF_DIR}/model_keys_check.py $<TARGET_FILE:kvfold_cli>
         ${KVF_FIXTURE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/model_keys_tmp)
set_tests_properties(model_keys PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 300
                     SKIP_RETURN_CODE 77)
