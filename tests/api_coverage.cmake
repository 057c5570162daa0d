# Fails when a function declared KVF_API in include/kvfold.h is called by no
# C file under tests/ (unit tests and helper programs): every public
# function has a test. Run by ctest as api_coverage:
#   cmake -DHEADER=include/kvfold.h -DTESTS=tests -P tests/api_coverage.cmake
file(READ "${HEADER}" header)
# Declarations end at ';' (comments in the header hold none between KVF_API and the name).
string(REGEX MATCHALL "KVF_API[^;(]*[ *](kvf_[a-z0-9_]+)[ ]*\\(" decls "${header}")
set(names "")
foreach(d ${decls})
  string(REGEX REPLACE ".*[ *](kvf_[a-z0-9_]+)[ ]*\\($" "\\1" name "${d}")
  list(APPEND names ${name})
endforeach()
list(LENGTH names n_names)
if(n_names LESS 10)
  message(FATAL_ERROR "api_coverage: found only ${n_names} KVF_API functions in ${HEADER}")
endif()

file(GLOB_RECURSE sources "${TESTS}/*.c" "${TESTS}/*.h")
set(all "")
foreach(f ${sources})
  file(READ "${f}" text)
  string(APPEND all "${text}\n")
endforeach()

set(missing "")
foreach(name ${names})
  # a call: the name, then '(' (kvf_kv_policy_check does not match kvf_kv_policy_check_budget)
  string(REGEX MATCH "[^a-z0-9_]${name}[ ]*\\(" hit "${all}")
  if(NOT hit)
    list(APPEND missing ${name})
  endif()
endforeach()
if(missing)
  string(REPLACE ";" ", " missing "${missing}")
  message(FATAL_ERROR "api_coverage: no test under ${TESTS} calls: ${missing}")
endif()
message(STATUS "api_coverage: all ${n_names} KVF_API functions are called by a test")
