# LLaVA-1.5 image preprocessing (pad to square, Pillow bicubic resize,
# normalise) against Pillow itself on seeded PNGs: every pixel within 1 level
# of 255 (tests/ref/image_ref.py). Exit 77 (skipped) without Pillow.
add_test(NAME image_preproc_ref
         COMMAND ${KVF_PYTHON} ${CMAKE_SOURCE_DIR}/tests/ref/image_ref.py $<TARGET_FILE:dump_preproc>
                 ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(image_preproc_ref PROPERTIES LABELS integration TIMEOUT 120 SKIP_RETURN_CODE 77)

# Decoding against Pillow's Image.open().convert("RGB") on 38 files of every
# format and colour type, pixel for pixel; the peak RSS of hostile files
# (the 2 GB IDAT, chunk bombs, cut progressive JPEGs) within the documented
# bounds; the padding resize of a 1x40000 image in linear time
# (tests/ref/image_decode_ref.py). Exit 77 (skipped) without Pillow.
add_test(NAME image_decode_ref
         COMMAND ${KVF_PYTHON} ${CMAKE_SOURCE_DIR}/tests/ref/image_decode_ref.py $<TARGET_FILE:dump_image>
                 $<TARGET_FILE:dump_preproc> ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(image_decode_ref PROPERTIES LABELS integration TIMEOUT 120 SKIP_RETURN_CODE 77)
