# ddplaunch_embed(TARGET NAME SOURCE [INLINE file...]): compiles SOURCE (a file
# in another language: the live page, the Python hook) into TARGET as
# `std::string_view ddplaunch::embedded::NAME()` (declared in
# src/embedded.hpp), so the binary still needs only libc at run time. Each
# INLINE file (a stylesheet or script beside an HTML page) replaces the line
# of SOURCE that names it (`<link ... href="F">` or `<script src="F">`) with
# its text inside <style> or <script>: the source page opens as it is in a
# browser, and the embedded one is self-contained.
function(ddplaunch_embed target name source)
  cmake_parse_arguments(EMBED "" "" "INLINE" ${ARGN})
  set(out ${CMAKE_CURRENT_BINARY_DIR}/embedded/${name}.cpp)
  set(inputs ${CMAKE_CURRENT_SOURCE_DIR}/${source})
  set(inline_paths "")
  foreach(f IN LISTS EMBED_INLINE)
    list(APPEND inputs ${CMAKE_CURRENT_SOURCE_DIR}/${f})
    list(APPEND inline_paths ${CMAKE_CURRENT_SOURCE_DIR}/${f})
  endforeach()
  string(REPLACE ";" "|" inline_arg "${inline_paths}")
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DNAME=${name} -DSOURCE=${CMAKE_CURRENT_SOURCE_DIR}/${source}
            "-DINLINE=${inline_arg}" -DOUTPUT=${out}
            -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/EmbedFile.cmake
    DEPENDS ${inputs} ${CMAKE_CURRENT_SOURCE_DIR}/cmake/EmbedFile.cmake
    COMMENT "Embedding ${source}"
    VERBATIM)
  target_sources(${target} PRIVATE ${out})
endfunction()
