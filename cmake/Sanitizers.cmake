# DDPLAUNCH_SANITIZE=address  -> AddressSanitizer + UndefinedBehaviorSanitizer
# DDPLAUNCH_SANITIZE=thread   -> ThreadSanitizer
if(DDPLAUNCH_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(DDPLAUNCH_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(NOT DDPLAUNCH_SANITIZE STREQUAL "")
  message(FATAL_ERROR "DDPLAUNCH_SANITIZE must be '', 'address' or 'thread'")
endif()
