# The seed corpora of the fuzz harnesses, written into OUT/seeds/<kind>/:
# the fixtures (make_fixture into OUT/fixtures, which the harnesses also
# load), make_seeds' files, and Pillow's images when PYTHON has Pillow.
# cmake -DMAKE_FIXTURE=... -DMAKE_SEEDS=... -DPYTHON=... -DSRC=tests/fuzz -DOUT=... -P seeds.cmake
file(REMOVE_RECURSE ${OUT}/seeds)
foreach(step "${MAKE_FIXTURE};${OUT}/fixtures" "${MAKE_SEEDS};${OUT}/fixtures;${OUT}/seeds")
  execute_process(COMMAND ${step} OUTPUT_QUIET RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "${step}: ${rc}")
  endif()
endforeach()
if(EXISTS ${PYTHON})
  execute_process(COMMAND ${PYTHON} ${SRC}/make_image_seeds.py ${OUT}/seeds/image RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "make_image_seeds.py: ${rc}")
  endif()
else()
  message(STATUS "no ${PYTHON}: only the PPM/PGM image seeds")
endif()
