# Project-code settings shared by every mimo target: warnings (as errors when
# MIMO_WERROR is on) and the include roots, so headers are included as
# "runtime/core/Grid.h" and generated ones as "ir/MimoOps.h.inc".
function(mimo_project_target target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter
    $<$<BOOL:${MIMO_WERROR}>:-Werror>)
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}>)
endfunction()
