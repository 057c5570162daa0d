# The tiny Gemma 3 vision fixture (make_fixture: gemma3v-st/, and the same
# weights as gemma3v-f32.gguf + gemma3v-mmproj-f32.gguf in llama.cpp's
# layout): SigLIP, Gemma 3's pooling projector, "\n\n<start_of_image>" ...
# "<end_of_image>\n\n" around each image, and an image's tokens attending to
# each other in the decoder (window 4, shorter than an image).

set(KVF_GEMMA3V_ST ${CMAKE_BINARY_DIR}/fixtures/gemma3v-st)
set(KVF_GEMMA3V_GGUF ${CMAKE_BINARY_DIR}/fixtures/gemma3v-f32.gguf)
set(KVF_GEMMA3V_MMPROJ ${CMAKE_BINARY_DIR}/fixtures/gemma3v-mmproj-f32.gguf)

# Against Hugging Face's Gemma3ForConditionalGeneration and
# Gemma3ImageProcessorPil (tests/ref/hf_gemma3_check.py): pixels of 12 odd
# images exact, the prompt's ids Gemma3Processor's, every position's logits
# within 1e-4 from both formats. Needs .venv-hf (skips without it).
add_test(NAME hf_gemma3v COMMAND ${KVF_HF_PYTHON} ${CMAKE_SOURCE_DIR}/tests/ref/hf_gemma3_check.py
         --dump $<TARGET_FILE:dump_logits> --preproc $<TARGET_FILE:dump_preproc>
         --gguf ${KVF_GEMMA3V_GGUF} --mmproj ${KVF_GEMMA3V_MMPROJ} ${KVF_GEMMA3V_ST})
set_tests_properties(hf_gemma3v PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 300
                     SKIP_RETURN_CODE 77)

# Without transformers: the GGUF + mmproj pair gives the directory's ids and
# logits, each image one run of 16 tokens between its delimiters.
add_test(NAME gemma3v_formats COMMAND ${KVF_PYTHON} ${CMAKE_SOURCE_DIR}/tests/ref/hf_gemma3_check.py --formats-only
         --dump $<TARGET_FILE:dump_logits> --preproc $<TARGET_FILE:dump_preproc>
         --gguf ${KVF_GEMMA3V_GGUF} --mmproj ${KVF_GEMMA3V_MMPROJ} ${KVF_GEMMA3V_ST})
set_tests_properties(gemma3v_formats PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 120
                     SKIP_RETURN_CODE 77)

# The LLaVA fixture's policy checks on Gemma 3's vision path (see kv.cmake):
# every policy forked equals its own session, decoded in a batch equals
# decoded alone, a prompt in parts (an image always one pass) equals the
# prompt whole, a session saved and loaded goes on as the original (its
# sliding-window layers freeing as they go) -- bit for bit.
foreach(tool kv_fork decode_batch prefill_parts session_file)
  add_test(NAME ${tool}_gemma3v COMMAND ${tool} ${KVF_GEMMA3V_GGUF} ${KVF_GEMMA3V_MMPROJ})
  set_tests_properties(${tool}_gemma3v PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 120)
endforeach()
# The same on 4-bit caches (head_dim 32 takes the block types), keys and
# values alike and not: every rule forks, decodes in a batch and prefills in
# parts on Q4_0, Q4_0H and smoothed Q4_0S rows as it does on F16 ones
# (session_file runs its own Q8_0 / Q4_0 / Q4_0H / Q4_0S sessions).
foreach(tool kv_fork decode_batch prefill_parts)
  foreach(types q4_0 q4_0h/q4_0 q8_0/q4_0h q4_0s/q4_0h)
    string(REPLACE "/" "_" suffix ${types})
    add_test(NAME ${tool}_gemma3v_${suffix} COMMAND ${tool} ${KVF_GEMMA3V_GGUF} ${KVF_GEMMA3V_MMPROJ})
    set_tests_properties(${tool}_gemma3v_${suffix} PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration
                         TIMEOUT 120 ENVIRONMENT KVF_TEST_CACHE_TYPES=${types})
  endforeach()
endforeach()

# kv_bound with the vision tower loaded (tests/tools/kv_bound.c): every
# preset at budget 1.0 gives the full cache's logits bit for bit, and every
# policy keeps its per-head bound on a 1400-position prompt around a
# 576-token pseudo-image that attends to itself (block-wise: budget plus the
# larger of the block and the image, which is one pass).
add_test(NAME kv_bound_gemma3v COMMAND kv_bound ${KVF_GEMMA3V_GGUF} ${CMAKE_SOURCE_DIR}/tests/data/ppl_passage.txt
                                300 40 ${KVF_GEMMA3V_MMPROJ})
set_tests_properties(kv_bound_gemma3v PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 120)
