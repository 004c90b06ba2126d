# DDPLAUNCH_SANITIZE=address  -> AddressSanitizer + UndefinedBehaviorSanitizer
# DDPLAUNCH_SANITIZE=thread   -> ThreadSanitizer
# DDPLAUNCH_SANITIZE=fuzzer   -> libFuzzer targets (tests/fuzz) with ASan+UBSan; clang only
# Every sanitizer build is compiled -O1 with line tables only (-g1), after
# the build type's flags: reports keep their file:line frames, and the build
# takes 5.3 min instead of 7.6 (-O2 -g1) or more (-O2 -g) on 2 cores;
# quickstart.sh also makes them unity builds (2.1 min), which is most of
# what keeps the CI run (./quickstart.sh test) in its budget.
if(NOT DDPLAUNCH_SANITIZE STREQUAL "")
  add_compile_options(-O1 -g1)
endif()
if(DDPLAUNCH_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(DDPLAUNCH_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(DDPLAUNCH_SANITIZE STREQUAL "fuzzer")
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "DDPLAUNCH_SANITIZE=fuzzer needs clang (Debian: clang, libclang-rt-14-dev): "
                        "configure with -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(NOT DDPLAUNCH_SANITIZE STREQUAL "")
  message(FATAL_ERROR "DDPLAUNCH_SANITIZE must be '', 'address', 'thread' or 'fuzzer'")
endif()
