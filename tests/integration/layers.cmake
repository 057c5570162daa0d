# The include graph of src/ has no back-edges (core -> io -> tok -> kv ->
# attn -> model -> session), and the CLI includes only kvfold.h.
add_test(NAME layers COMMAND ${KVF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/lint/layers.py ${CMAKE_SOURCE_DIR})
set_tests_properties(layers PROPERTIES LABELS lint TIMEOUT 60)

# Every C file follows .clang-format's layout rules (line length, indents,
# whitespace).
add_test(NAME style COMMAND ${KVF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/lint/style.py ${CMAKE_SOURCE_DIR})
set_tests_properties(style PROPERTIES LABELS lint TIMEOUT 60)

# The lines a change touches (HEAD's commit and the uncommitted changes) are
# clang-format's layout under .clang-format; skips without git or
# clang-format 14, or outside a git work tree.
add_test(NAME lint_format COMMAND ${KVF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/lint/format.py ${CMAKE_SOURCE_DIR})
set_tests_properties(lint_format PROPERTIES LABELS lint TIMEOUT 120)
