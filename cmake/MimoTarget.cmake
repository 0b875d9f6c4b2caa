# Project-code settings shared by every mimo target: warnings (as errors when
# MIMO_WERROR is on) and the include roots, so headers are included as
# "runtime/config/Grid.h" and generated ones as "ir/MimoOps.h.inc". Warning
# flags reach only C++ (nvcc rejects -Wall); CUDA sources get nvcc's own.
function(mimo_project_target target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${MIMO_WERROR}>>:-Werror>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${MIMO_WERROR}>>:--Werror=all-warnings>)
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}>)
endfunction()
