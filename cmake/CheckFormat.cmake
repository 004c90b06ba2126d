# cmake -DSOURCE_DIR=... -DCLANG_FORMAT=... -P CheckFormat.cmake
# Fails when any C or C++ file tracked in the repository differs from what the
# checked-in .clang-format makes of it, and names each such file. One
# clang-format run checks them all (one process per file took a minute of CPU).
execute_process(COMMAND git ls-files -- "*.c" "*.h" "*.cpp" "*.hpp"
                WORKING_DIRECTORY "${SOURCE_DIR}" OUTPUT_VARIABLE files
                RESULT_VARIABLE git_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT git_rc EQUAL 0 OR files STREQUAL "")
  file(GLOB_RECURSE files RELATIVE "${SOURCE_DIR}"
       "${SOURCE_DIR}/src/*.[ch]pp" "${SOURCE_DIR}/include/*.hpp" "${SOURCE_DIR}/tests/*.cpp"
       "${SOURCE_DIR}/bench/*.c" "${SOURCE_DIR}/bench/*.cpp")
else()
  string(REPLACE "\n" ";" files "${files}")
endif()
execute_process(COMMAND "${CLANG_FORMAT}" --style=file --dry-run --Werror ${files}
                WORKING_DIRECTORY "${SOURCE_DIR}" RESULT_VARIABLE rc OUTPUT_QUIET
                ERROR_VARIABLE complaints)
list(LENGTH files checked)
if(NOT rc EQUAL 0)
  # Each complaint starts "FILE:LINE:COL: error: ..."; name each file once.
  string(REGEX MATCHALL "[^\n:]+:[0-9]+:[0-9]+: error" found "${complaints}")
  set(drifted "")
  foreach(f IN LISTS found)
    string(REGEX REPLACE ":[0-9]+:[0-9]+: error$" "" f "${f}")
    list(APPEND drifted "${f}")
  endforeach()
  list(REMOVE_DUPLICATES drifted)
  if(NOT drifted)
    set(drifted "(clang-format said: ${complaints})")
  endif()
  string(REPLACE ";" "\n  " shown "${drifted}")
  message(FATAL_ERROR "these files differ from .clang-format; run "
                      "'clang-format -i' on them:\n  ${shown}")
endif()
message(STATUS "${checked} files match .clang-format")
