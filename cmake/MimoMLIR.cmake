# MLIR 19 from Debian, out of tree (the pattern of mlir/examples/standalone).
# The project links the single shared libMLIR.so + libLLVM.so, never the
# static component libraries as well.
find_package(MLIR REQUIRED CONFIG HINTS /usr/lib/llvm-19/lib/cmake/mlir)
if(NOT LLVM_VERSION_MAJOR EQUAL 19)
  message(FATAL_ERROR "mimo needs MLIR 19, found ${LLVM_VERSION} in ${MLIR_DIR}; "
    "configure with -DMLIR_DIR=/usr/lib/llvm-19/lib/cmake/mlir")
endif()
message(STATUS "Using MLIRConfig.cmake in: ${MLIR_DIR}")

list(APPEND CMAKE_MODULE_PATH "${MLIR_CMAKE_DIR}" "${LLVM_CMAKE_DIR}")
include(TableGen)
include(AddLLVM)
include(AddMLIR)

find_package(Python3 REQUIRED COMPONENTS Interpreter)

include_directories(SYSTEM ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})
# ODS files include each other as "ir/MimoDialect.td".
include_directories(${PROJECT_SOURCE_DIR})
separate_arguments(MIMO_LLVM_DEFINITIONS NATIVE_COMMAND ${LLVM_DEFINITIONS})
add_definitions(${MIMO_LLVM_DEFINITIONS})

find_library(MIMO_LIBMLIR NAMES MLIR PATHS ${LLVM_LIBRARY_DIR} NO_DEFAULT_PATH
  REQUIRED)
find_library(MIMO_LIBLLVM NAMES LLVM LLVM-19 PATHS ${LLVM_LIBRARY_DIR}
  NO_DEFAULT_PATH REQUIRED)
add_library(mimo_mlir INTERFACE)
target_link_libraries(mimo_mlir INTERFACE ${MIMO_LIBMLIR} ${MIMO_LIBLLVM})

set(MIMO_LIT "${LLVM_TOOLS_BINARY_DIR}/../build/utils/lit/lit.py")
if(NOT EXISTS "${MIMO_LIT}")
  set(MIMO_LIT "/usr/lib/llvm-19/build/utils/lit/lit.py")
endif()
set(MIMO_FILECHECK "${LLVM_TOOLS_BINARY_DIR}/FileCheck")
