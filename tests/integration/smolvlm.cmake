# SmolVLM / Idefics3 against Hugging Face's SmolVLMForConditionalGeneration
# and Idefics3ForConditionalGeneration (tests/ref/hf_smolvlm_check.py): the
# script builds a tiny random model with transformers (SigLIP with the pixel
# shuffle and one linear map, a Llama decoder) into the build tree, and
# writes the same weights as llama.cpp's GGUF + idefics3 mmproj, then checks
# kvfold's preprocessing (Pillow's Lanczos, the chained resizes, the tiles:
# sub-images and pixels exact), prompt ids (Idefics3Processor's), every
# position's logits (within 1e-4; the GGUF pair within 1e-5 of the
# directory) and runs the policy checks (kv_fork, decode_batch,
# prefill_parts, session_file, kv_bound) on it. hf_smolvlm: transformers'
# default processing (tiles and the global image, NaViT position rows that
# repeat), and llama.cpp's global image alone from the GGUF pair
# (--image-max-tokens); hf_idefics3: do_image_splitting false. Needs .venv-hf
# (skips without).
foreach(family smolvlm idefics3)
  add_test(NAME hf_${family} COMMAND ${KVF_HF_PYTHON} ${CMAKE_SOURCE_DIR}/tests/ref/hf_smolvlm_check.py
           --family ${family} --dump $<TARGET_FILE:dump_logits> --preproc $<TARGET_FILE:dump_preproc>
           --fixtures ${CMAKE_BINARY_DIR}/fixtures --passage ${CMAKE_SOURCE_DIR}/tests/data/ppl_passage.txt
           ${CMAKE_BINARY_DIR}/fixtures/${family}-hf)
  set_tests_properties(hf_${family} PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS integration TIMEOUT 300
                       SKIP_RETURN_CODE 77)
endforeach()
