# The tiny LLaVA fixture (make_fixture: llava-f32.gguf + llava-mmproj-*.gguf,
# llava-st/, llava-st-new/) against the numpy reference tests/ref/ref_llava.py:
# two padded, resized images and text through CLIP, the projector and the
# decoder, every position's logits within 1e-4 (tests/ref/compare_llava.py).
# F16 mmproj weights are read as the same stored values by both sides, so the
# bound stays 1e-4. Exit 77 (skipped) when a file or Pillow is absent.

set(KVF_FIXTURE_DIR "${CMAKE_BINARY_DIR}/fixtures")
set(KVF_REF_DIR "${CMAKE_SOURCE_DIR}/tests/ref")

# The reference itself: every LLaVA convention it implements (vision GELU
# form, CLS dropped, feature layer, padding colour, padding, bicubic resize)
# moves the logits by more than 10x the bound, and the three formats of the
# fixture give it the same logits.
add_test(NAME ref_check_llava COMMAND ${KVF_PYTHON} ${KVF_REF_DIR}/ref_llava.py check ${KVF_FIXTURE_DIR})
set_tests_properties(ref_check_llava PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 120
                     SKIP_RETURN_CODE 77)

# kvf_llava_test(NAME MODEL [compare_llava.py options...])
function(kvf_llava_test name model)
  add_test(NAME logits_llava_${name}
           COMMAND ${KVF_PYTHON} ${KVF_REF_DIR}/compare_llava.py --dump $<TARGET_FILE:dump_logits> ${model} ${ARGN})
  set_tests_properties(logits_llava_${name} PROPERTIES LABELS integration TIMEOUT 300 SKIP_RETURN_CODE 77
                       FIXTURES_REQUIRED kvf_fixtures)
endfunction()

kvf_llava_test(f32 ${KVF_FIXTURE_DIR}/llava-f32.gguf --mmproj ${KVF_FIXTURE_DIR}/llava-mmproj-f32.gguf)
kvf_llava_test(f16 ${KVF_FIXTURE_DIR}/llava-f32.gguf --mmproj ${KVF_FIXTURE_DIR}/llava-mmproj-f16.gguf)
# The safetensors directories hold the same weights as the GGUF pair.
kvf_llava_test(st ${KVF_FIXTURE_DIR}/llava-st --same-as ${KVF_FIXTURE_DIR}/llava-f32.gguf
               --same-as-mmproj ${KVF_FIXTURE_DIR}/llava-mmproj-f32.gguf)
kvf_llava_test(st_new ${KVF_FIXTURE_DIR}/llava-st-new --same-as ${KVF_FIXTURE_DIR}/llava-st)

# Against Hugging Face's LlavaForConditionalGeneration itself; needs torch +
# transformers (.venv-hf, scripts/setup-hf.sh; without it the test skips).
add_test(NAME hf_llava_st COMMAND ${KVF_HF_PYTHON} ${KVF_REF_DIR}/hf_llava_check.py
         --dump $<TARGET_FILE:dump_logits> ${KVF_FIXTURE_DIR}/llava-st)
set_tests_properties(hf_llava_st PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 300
                     SKIP_RETURN_CODE 77)

# The reduce stage (lightkv, tome, fastv after layer 1) against a numpy
# reference of its rules: the last position's logits within 1e-4 and every
# layer's cached positions; wrong rules must miss by 10x the bound.
add_test(NAME ref_reduce_llava COMMAND ${KVF_PYTHON} ${KVF_REF_DIR}/ref_reduce.py --dump $<TARGET_FILE:dump_logits>
         ${KVF_FIXTURE_DIR}/llava-f32.gguf --mmproj ${KVF_FIXTURE_DIR}/llava-mmproj-f32.gguf)
set_tests_properties(ref_reduce_llava PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 300
                     SKIP_RETURN_CODE 77)
