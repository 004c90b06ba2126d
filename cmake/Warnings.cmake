# ddplaunch_warnings(target): the project's warning set, clean by policy.
function(ddplaunch_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion)
endfunction()
