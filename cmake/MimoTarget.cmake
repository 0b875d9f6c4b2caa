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
  # Lower optimization where nothing measured runs, since it compiles in a
  # half to a quarter of the time of Release's -O3: the test programs' own
  # code at -O0 (TEST: the runtime they call keeps -O3) and, in the
  # sanitizer builds, everything but the CPU kernels at -O1
  # (runtime/CMakeLists.txt gives them -O3 back), where the sanitized
  # trainings spend their time.
  cmake_parse_arguments(PARSE_ARGV 1 arg "TEST" "" "")
  if(arg_TEST)
    target_compile_options(${target} PRIVATE
      $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Release>>:-O0>)
  elseif(MIMO_SANITIZE)
    target_compile_options(${target} PRIVATE
      $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Release>>:-O1>)
  endif()
endfunction()
