# DDPLAUNCH_SANITIZE=address  -> AddressSanitizer + UndefinedBehaviorSanitizer
# DDPLAUNCH_SANITIZE=thread   -> ThreadSanitizer
# DDPLAUNCH_SANITIZE=fuzzer   -> libFuzzer targets (tests/fuzz) with ASan+UBSan; clang only
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
