# MileBench's scoring rules (tools/kvfold/lab/metrics.c) against a Python
# reference of MileBench's evaluate.py and the `rouge` package it calls
# (tests/ref/milebench_ref.py, ~3000 seeded cases). Exit 77 (skipped)
# without `rouge` in the venv.
add_test(NAME milebench_ref
         COMMAND ${KVF_PYTHON} ${CMAKE_SOURCE_DIR}/tests/ref/milebench_ref.py $<TARGET_FILE:mb_score>)
set_tests_properties(milebench_ref PROPERTIES LABELS integration TIMEOUT 120 SKIP_RETURN_CODE 77)
