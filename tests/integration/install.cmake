# The installed library as an embedder sees it (tests/install/): installed
# into a temporary prefix, only kvf_* exported by libkvfold.so, and a small
# program built through pkg-config against the shared and the static
# library, run on a tiny fixture and on SmolLM2 when models/ has it.
add_test(NAME install_pkgconfig
  COMMAND sh ${CMAKE_SOURCE_DIR}/tests/install/install_test.sh
          ${CMAKE_COMMAND} ${CMAKE_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/install_tmp
          ${CMAKE_INSTALL_LIBDIR} ${CMAKE_C_COMPILER} ${PKG_CONFIG_EXECUTABLE} ${PROJECT_VERSION}
          ${CMAKE_BINARY_DIR}/fixtures/llama-q4_0.gguf ${KVF_MODELS_DIR}/smollm2-135m-instruct-q4_1.gguf)
set_tests_properties(install_pkgconfig PROPERTIES LABELS install TIMEOUT 300
                     FIXTURES_REQUIRED kvf_fixtures)
