# The Python package (python/kvfold, tests/python): the ctypes declarations
# against kvfold.h and the C compiler, and the API against the CLI, run on
# this build's libkvfold.so; the package pip installed (make python) is
# checked from outside the source tree where the venv has it.
add_test(NAME python_api COMMAND ${KVF_PYTHON} -m pytest -q -p no:cacheprovider ${CMAKE_SOURCE_DIR}/tests/python)
set(KVF_PYTHON_ENV KVFOLD_LIBRARY=$<TARGET_FILE:${KVF_SHARED_LIB}> KVFOLD_CLI=$<TARGET_FILE:kvfold_cli>
    KVFOLD_BUILD=${CMAKE_BINARY_DIR} PYTHONPATH=${CMAKE_SOURCE_DIR}/python:${CMAKE_SOURCE_DIR}/tests/python)
set_tests_properties(python_api PROPERTIES FIXTURES_REQUIRED kvf_fixtures LABELS "integration;python" TIMEOUT 600
                     ENVIRONMENT "${KVF_PYTHON_ENV}")
