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
  # Lower optimization where nothing measured runs, since -O0 compiles in a
  # half to a quarter of the time of Release's -O3: the test programs' own
  # code (TEST: the runtime they call keeps -O3) and, in the sanitizer
  # builds, everything but the CPU kernels (runtime/CMakeLists.txt gives
  # them -O3 back), where the sanitized trainings spend their time.
  cmake_parse_arguments(PARSE_ARGV 1 arg "TEST" "" "")
  if(arg_TEST OR MIMO_SANITIZE)
    target_compile_options(${target} PRIVATE
      $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Release>>:-O0>)
  endif()
endfunction()

# Every test's environment (MIMO_TEST_ENVIRONMENT). ctest -j runs tests side
# by side, each sizing its kernel threads to all the cores: waiting OpenMP
# threads sleep instead of spinning, which took the cores the other tests
# were computing on (the layouts' tests ran in half the time with ctest -j2
# on 2 cores). gtest_discover_tests takes it as a property; this gives it to
# the tests the calling directory adds, after their own properties.
set(MIMO_TEST_ENVIRONMENT "OMP_WAIT_POLICY=passive")
function(mimo_test_environment)
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(test IN LISTS tests)
    set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT
      ${MIMO_TEST_ENVIRONMENT})
  endforeach()
endfunction()
