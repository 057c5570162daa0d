# Logits of the tiny random-weight fixtures (written by make_fixture into the
# build tree) and of the real models, checked against the numpy reference in
# tests/ref/. Real-model tests skip (exit 77) when models/ lacks the file.

set(KVF_FIXTURE_DIR "${CMAKE_BINARY_DIR}/fixtures")
set(KVF_REF_DIR "${CMAKE_SOURCE_DIR}/tests/ref")

add_test(NAME fixtures_make COMMAND make_fixture ${KVF_FIXTURE_DIR})
set_tests_properties(fixtures_make PROPERTIES FIXTURES_SETUP kvf_fixtures LABELS integration TIMEOUT 60)

# The reference itself: every convention it implements moves the fixtures'
# logits, and both formats of one fixture model agree.
add_test(NAME ref_check_fixtures COMMAND ${KVF_PYTHON} ${KVF_REF_DIR}/check_ref.py fixtures ${KVF_FIXTURE_DIR})
set_tests_properties(ref_check_fixtures PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 120)

# kvf_logits_test(NAME MODEL [compare_logits.py options...])
function(kvf_logits_test name model)
  add_test(NAME logits_${name}
           COMMAND ${KVF_PYTHON} ${KVF_REF_DIR}/compare_logits.py --dump $<TARGET_FILE:dump_logits> ${model} ${ARGN})
  set_tests_properties(logits_${name} PROPERTIES LABELS integration TIMEOUT 300 SKIP_RETURN_CODE 77)
endfunction()

# --threads-bits 3: the same logits decoding on one thread and on three
# (the fixtures' two kv heads do not share out evenly on 3).
foreach(type f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k)
  kvf_logits_test(llama_${type} ${KVF_FIXTURE_DIR}/llama-${type}.gguf --threads-bits 3)
  set_tests_properties(logits_llama_${type} PROPERTIES FIXTURES_REQUIRED kvf_fixtures)
endforeach()
kvf_logits_test(qwen2_f32 ${KVF_FIXTURE_DIR}/qwen2-f32.gguf --threads-bits 3)
kvf_logits_test(gemma3_f32 ${KVF_FIXTURE_DIR}/gemma3-f32.gguf --threads-bits 3)
# Each safetensors fixture holds the same weights as a GGUF one (the GGUF
# side converted as llama.cpp's converter does).
kvf_logits_test(llama_st ${KVF_FIXTURE_DIR}/llama-st --same-as ${KVF_FIXTURE_DIR}/llama-f32.gguf)
kvf_logits_test(llama_st_bf16 ${KVF_FIXTURE_DIR}/llama-st-bf16)
kvf_logits_test(llama_st_sharded ${KVF_FIXTURE_DIR}/llama-st-sharded --same-as ${KVF_FIXTURE_DIR}/llama-st)
kvf_logits_test(qwen2_st ${KVF_FIXTURE_DIR}/qwen2-st --same-as ${KVF_FIXTURE_DIR}/qwen2-f32.gguf)
kvf_logits_test(gemma3_st ${KVF_FIXTURE_DIR}/gemma3-st --same-as ${KVF_FIXTURE_DIR}/gemma3-f32.gguf)
set_tests_properties(logits_qwen2_f32 logits_gemma3_f32 logits_llama_st logits_llama_st_bf16
                     logits_llama_st_sharded logits_qwen2_st logits_gemma3_st
                     PROPERTIES FIXTURES_REQUIRED kvf_fixtures)

# Real weights: quantisation-aware bound plus top-1 / top-5 agreement.
kvf_logits_test(real_smollm2 ${KVF_MODELS_DIR}/smollm2-135m-instruct-q4_1.gguf --real)
kvf_logits_test(real_gemma3 ${KVF_MODELS_DIR}/gemma3-270m-q4_k_m.gguf --real)
set_tests_properties(logits_real_smollm2 logits_real_gemma3 PROPERTIES LABELS "integration;real")

add_test(NAME ref_check_real COMMAND ${KVF_PYTHON} ${KVF_REF_DIR}/check_ref.py real
         ${KVF_MODELS_DIR}/smollm2-135m-instruct-q4_1.gguf ${KVF_MODELS_DIR}/gemma3-270m-q4_k_m.gguf)
set_tests_properties(ref_check_real PROPERTIES LABELS "integration;real" TIMEOUT 300 SKIP_RETURN_CODE 77)

# Qwen3 (per-head q/k RMSNorm, head_dim 32 apart from n_embd / n_head): the
# GGUF against the numpy reference, the safetensors directory the same; the
# policy checks of kv.cmake on it, its two pictures pseudo-images (a text
# model): every policy forked equals its own session, decoded in a batch
# equals decoded alone, a prompt in parts equals the prompt whole, a session
# saved and loaded goes on as the original -- bit for bit.
kvf_logits_test(qwen3_f32 ${KVF_FIXTURE_DIR}/qwen3-f32.gguf --threads-bits 3)
kvf_logits_test(qwen3_st ${KVF_FIXTURE_DIR}/qwen3-st --same-as ${KVF_FIXTURE_DIR}/qwen3-f32.gguf)
set_tests_properties(logits_qwen3_f32 logits_qwen3_st PROPERTIES FIXTURES_REQUIRED kvf_fixtures)
foreach(tool kv_fork decode_batch prefill_parts session_file)
  add_test(NAME ${tool}_qwen3 COMMAND ${tool} ${KVF_FIXTURE_DIR}/qwen3-f32.gguf -)
  set_tests_properties(${tool}_qwen3 PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 120)
endforeach()
