# End-to-end tests of the kvfold CLI (tests/cli/cli_test.py, one ctest entry
# per case; label "cli"). Cases that need the real models or the shared
# tokenizer vectors exit 77 (skipped) when those files are absent.
#
# cli_perplexity's bound: SmolLM2-135M-Instruct Q4_1 on tests/data/ppl_passage.txt
# (Jane Austen, Pride and Prejudice, 1813, chapters 1-2; public domain) with
# --ctx 512 --chunks 2 (512 tokens scored) measured PPL = 16.73 +/- 1.81. The
# bound is that x 1.15: a broken decoder gives PPL in the hundreds or more,
# while kernel, threading and summation-order changes move it by far less.
set(KVF_CLI_PPL_MAX 19.2)
set(KVF_CLI_TEST ${CMAKE_CURRENT_SOURCE_DIR}/cli/cli_test.py)
foreach(case usage badfiles badfiles_real hostile tokenize info generate generate_json perplexity bench demo kv kv_short kvzap kv_mm
             blockwise reduce eval)
  set(extra)
  if(case STREQUAL "perplexity")
    set(extra ${KVF_CLI_PPL_MAX})
  endif()
  add_test(NAME cli_${case}
    COMMAND ${KVF_PYTHON} ${KVF_CLI_TEST} ${case} $<TARGET_FILE:kvfold_cli>
            ${KVF_MODELS_DIR} ${KVF_SHARED_DIR} ${CMAKE_CURRENT_BINARY_DIR}/cli_tmp/${case} ${extra})
  set_tests_properties(cli_${case} PROPERTIES LABELS cli SKIP_RETURN_CODE 77 TIMEOUT 300)
endforeach()

# kvfold bench's llama-bench lists and formats, progress and Ctrl-C in bench
# and perplexity, the OpenMP spin and OpenBLAS kernel defaults
# (tests/cli/bench_test.py).
foreach(case bench_lists bench_errors bench_interrupt bench_spin bench_blas bench_kernels)
  add_test(NAME cli_${case}
    COMMAND ${KVF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/bench_test.py ${case} $<TARGET_FILE:kvfold_cli>
            ${KVF_MODELS_DIR} ${KVF_SHARED_DIR} ${CMAKE_CURRENT_BINARY_DIR}/cli_tmp/${case})
  set_tests_properties(cli_${case} PROPERTIES LABELS cli SKIP_RETURN_CODE 77 TIMEOUT 300)
endforeach()

# kvfold eval's long runs (tests/cli/eval_test.py): results.jsonl row by row,
# Ctrl-C, --resume, the progress line, the SVG pictures; RULER's samples.
foreach(case eval_resume eval_plots eval_question eval_ruler)
  add_test(NAME cli_${case}
    COMMAND ${KVF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/eval_test.py ${case} $<TARGET_FILE:kvfold_cli>
            ${KVF_MODELS_DIR} ${KVF_SHARED_DIR} ${CMAKE_CURRENT_BINARY_DIR}/cli_tmp/${case})
  set_tests_properties(cli_${case} PROPERTIES LABELS cli SKIP_RETURN_CODE 77 TIMEOUT 300)
endforeach()

# Multimodal input (tests/cli/mm_test.py): the tiny LLaVA fixture and
# pseudo-images on the real SmolLM2.
foreach(case mm_generate mm_video mm_errors pseudo mm_bench milebench)
  add_test(NAME cli_${case}
    COMMAND ${KVF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/mm_test.py ${case} $<TARGET_FILE:kvfold_cli>
            ${KVF_MODELS_DIR} ${CMAKE_BINARY_DIR}/fixtures ${CMAKE_CURRENT_BINARY_DIR}/cli_tmp/${case})
  set_tests_properties(cli_${case} PROPERTIES LABELS cli SKIP_RETURN_CODE 77 TIMEOUT 300
                       FIXTURES_REQUIRED kvf_fixtures)
endforeach()

# kvfold serve (tests/cli/serve_test.py): the HTTP API through http.client and
# the openai package, the shared KV budget under load, the bad-request battery.
foreach(case serve_api serve_image serve_load serve_errors serve_cache serve_conns serve_figures serve_slots serve_replicas)
  add_test(NAME cli_${case}
    COMMAND ${KVF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/serve_test.py ${case} $<TARGET_FILE:kvfold_cli>
            ${KVF_MODELS_DIR} ${CMAKE_BINARY_DIR}/fixtures ${CMAKE_CURRENT_BINARY_DIR}/cli_tmp/${case})
  set_tests_properties(cli_${case} PROPERTIES LABELS "cli;serve" SKIP_RETURN_CODE 77 TIMEOUT 300
                       FIXTURES_REQUIRED kvf_fixtures)
endforeach()

# kvfold chat and generate's llama.cpp flags (tests/cli/chat_test.py): scripted
# conversations through a pipe and a pseudo-terminal, Ctrl-C, the LLaVA fixture,
# session files (/save, /load, --session, generate --session).
foreach(case chat_turns chat_kv chat_image chat_pty generate_flags chat_session)
  add_test(NAME cli_${case}
    COMMAND ${KVF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/chat_test.py ${case} $<TARGET_FILE:kvfold_cli>
            ${KVF_MODELS_DIR} ${CMAKE_BINARY_DIR}/fixtures ${CMAKE_CURRENT_BINARY_DIR}/cli_tmp/${case})
  set_tests_properties(cli_${case} PROPERTIES LABELS cli SKIP_RETURN_CODE 77 TIMEOUT 300
                       FIXTURES_REQUIRED kvf_fixtures)
endforeach()

# The README runs as written (tests/cli/readme_test.py): every kvfold command of
# its sh blocks, against examples/ and the `make models` files; the lines that
# need LLaVA-1.5-7B or `make models-large` files are skipped with the reason.
add_test(NAME cli_readme
  COMMAND ${KVF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/readme_test.py ${CMAKE_SOURCE_DIR}/README.md
          $<TARGET_FILE:kvfold_cli> ${KVF_MODELS_DIR} ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/cli_tmp/readme)
set_tests_properties(cli_readme PROPERTIES LABELS cli SKIP_RETURN_CODE 77 TIMEOUT 600)
