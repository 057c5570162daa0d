# LLaVA-1.5 image preprocessing (pad to square, Pillow bicubic resize,
# normalise) against Pillow itself on seeded PNGs: every pixel within 1 level
# of 255 (tests/ref/image_ref.py). Exit 77 (skipped) without Pillow.
add_test(NAME image_preproc_ref
         COMMAND ${KVF_PYTHON} ${CMAKE_SOURCE_DIR}/tests/ref/image_ref.py $<TARGET_FILE:dump_preproc>
                 ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(image_preproc_ref PROPERTIES LABELS integration TIMEOUT 120 SKIP_RETURN_CODE 77)
