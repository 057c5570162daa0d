# Qwen2.5-Coder-Instruct Q4_K_M (0.5B, and 1.5B where present), models that can
# answer (tests/cli/qwen_test.py; labels "cli" and "large"). They are fetched
# only by `make models-large` (scripts/models.sh --large), not by `make models`
# or `make test`, so without them both cases exit 77 and are reported skipped.
# qwen_answer: greedy --chat answer to "What is the capital of France? Answer in
# one word." must contain "Paris" (20 prompt tokens, 1 generated); 9-10 s on 2
# shared cores, almost all of it the 20-token prefill through the scalar Q5_0
# dot (the 0.5B file stores most matrices as Q5_0; there is no AVX2 kernel).
foreach(case info answer)
  add_test(NAME qwen_${case}
    COMMAND ${KVF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/qwen_test.py ${case} $<TARGET_FILE:kvfold_cli>
            ${KVF_MODELS_DIR} ${CMAKE_CURRENT_BINARY_DIR}/cli_tmp/qwen_${case})
  set_tests_properties(qwen_${case} PROPERTIES LABELS "cli;large" SKIP_RETURN_CODE 77 TIMEOUT 120)
endforeach()
