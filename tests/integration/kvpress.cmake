# kvfold's rules against NVIDIA kvpress's presses (PyPI kvpress 0.5.5, in
# .venv-kvpress from scripts/setup-kvpress.sh; skipped without it): knorm,
# keydiff, streaming, snapkv, Ada-KV, TOVA, Expected Attention and KVzip (global
# and layer-wise budgets) keep the same entries per (layer, kv head) on the
# tiny random Qwen2 fixture up to float32 near-ties at the cut, and pairs
# that differ (another rule, window, horizon, budget stage) are told apart
# (tests/ref/kvpress_check.py).
if(EXISTS "${CMAKE_SOURCE_DIR}/.venv-kvpress/bin/python")
  set(KVF_KVPRESS_PYTHON "${CMAKE_SOURCE_DIR}/.venv-kvpress/bin/python")
else()
  set(KVF_KVPRESS_PYTHON "${KVF_PYTHON}")
endif()
add_test(NAME kvpress_rules COMMAND ${KVF_KVPRESS_PYTHON} ${KVF_REF_DIR}/kvpress_check.py $<TARGET_FILE:kvfold_cli>
         ${KVF_FIXTURE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/kvpress_tmp)
set_tests_properties(kvpress_rules PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 300
                     SKIP_RETURN_CODE 77)
