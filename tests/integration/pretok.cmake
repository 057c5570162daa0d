# Every tokenizer.ggml.pre name llama.cpp knows, and the pieces of each
# pre-tokenizer on ~30 texts, against a Python rebuild of llama.cpp's
# unicode_regex_split (tests/ref/pretok_ref.py, tests/tools/pretok_split.c).
# Exit 77 (skipped) without the `regex` module; without the venv, a system
# python3 runs it (and skips when it lacks `regex`).
if(EXISTS ${KVF_PYTHON})
  set(KVF_PRETOK_PYTHON ${KVF_PYTHON})
else()
  find_program(KVF_PRETOK_PYTHON python3)
endif()
if(KVF_PRETOK_PYTHON)
  add_test(NAME pretok_ref
           COMMAND ${KVF_PRETOK_PYTHON} ${CMAKE_SOURCE_DIR}/tests/ref/pretok_ref.py $<TARGET_FILE:pretok_split>)
  set_tests_properties(pretok_ref PROPERTIES LABELS integration TIMEOUT 120 SKIP_RETURN_CODE 77)
endif()
