# Qwen2.5-VL against Hugging Face's Qwen2_5_VLForConditionalGeneration
# (tests/ref/hf_qwen25vl_check.py): the script builds a tiny random model
# with transformers (a windowed ViT with 2-D rotary positions, the patch
# merger, an M-RoPE decoder) into the build tree, and writes the same
# weights as llama.cpp's GGUF + mmproj, then checks kvfold's preprocessing
# (sizes and pixels exact), prompt ids and every position's logits (within
# 1e-4; the GGUF pair within 1e-5 of the directory) against it, and runs
# the policy checks (kv_fork, decode_batch, prefill_parts, session_file, kv_bound) on it.
# Needs .venv-hf (skips without).
add_test(NAME hf_qwen25vl COMMAND ${KVF_HF_PYTHON} ${CMAKE_SOURCE_DIR}/tests/ref/hf_qwen25vl_check.py
         --dump $<TARGET_FILE:dump_logits> --preproc $<TARGET_FILE:dump_preproc>
         --fixtures ${CMAKE_BINARY_DIR}/fixtures --passage ${CMAKE_SOURCE_DIR}/tests/data/ppl_passage.txt
         ${CMAKE_BINARY_DIR}/fixtures/qwen25vl-hf)
set_tests_properties(hf_qwen25vl PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 300
                     SKIP_RETURN_CODE 77)

# The same for Qwen2-VL's tower (LayerNorms, quick-GELU MLP, no windows;
# llama.cpp's qwen2vl_merger mmproj).
add_test(NAME hf_qwen2vl COMMAND ${KVF_HF_PYTHON} ${CMAKE_SOURCE_DIR}/tests/ref/hf_qwen25vl_check.py --family qwen2vl
         --dump $<TARGET_FILE:dump_logits> --preproc $<TARGET_FILE:dump_preproc>
         --fixtures ${CMAKE_BINARY_DIR}/fixtures --passage ${CMAKE_SOURCE_DIR}/tests/data/ppl_passage.txt
         ${CMAKE_BINARY_DIR}/fixtures/qwen2vl-hf)
set_tests_properties(hf_qwen2vl PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 300
                     SKIP_RETURN_CODE 77)

# Qwen3-VL against Hugging Face's Qwen3VLForConditionalGeneration
# (tests/ref/hf_qwen3vl_check.py): a tiny random model (a Qwen3 decoder with
# interleaved M-RoPE, a ViT with learned positions and DeepStack mergers)
# as a directory and as llama.cpp's qwen3vl GGUF + qwen3vl_merger mmproj:
# preprocessing, prompt ids, every position's logits, two mutations the
# reference tells apart, and the policy checks on it.
add_test(NAME hf_qwen3vl COMMAND ${KVF_HF_PYTHON} ${CMAKE_SOURCE_DIR}/tests/ref/hf_qwen3vl_check.py
         --dump $<TARGET_FILE:dump_logits> --preproc $<TARGET_FILE:dump_preproc>
         --fixtures ${CMAKE_BINARY_DIR}/fixtures --passage ${CMAKE_SOURCE_DIR}/tests/data/ppl_passage.txt
         ${CMAKE_BINARY_DIR}/fixtures/qwen3vl-hf)
set_tests_properties(hf_qwen3vl PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 300
                     SKIP_RETURN_CODE 77)
