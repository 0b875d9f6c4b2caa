# The CUDA toolchain for the CUDA device (MIMO_ENABLE_CUDA = AUTO|ON|OFF).
# Sets MIMO_HAVE_CUDA. Kernels are built for sm_80 (A100) and sm_90 (H100,
# H200) unless CMAKE_CUDA_ARCHITECTURES says otherwise; never `native`,
# which fails on machines without a GPU. The CUDA runtime is linked shared
# and the driver library never (a binary linked to libcuda cannot even
# start where no driver is installed).
set(MIMO_HAVE_CUDA OFF)
set(MIMO_HAVE_NCCL OFF)
if(NOT MIMO_ENABLE_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "MIMO_ENABLE_CUDA is '${MIMO_ENABLE_CUDA}'; use AUTO, ON or OFF")
endif()
if(NOT MIMO_ENABLE_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX}
     AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    if(NOT DEFINED CMAKE_CUDA_RUNTIME_LIBRARY)
      set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(MIMO_HAVE_CUDA ON)
    message(STATUS "mimo: CUDA device on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
      "architectures ${CMAKE_CUDA_ARCHITECTURES})")
    # The nccl backend needs only NCCL's header here: libnccl is opened with
    # dlopen when the backend starts (comm/NcclComm.cpp).
    find_path(MIMO_NCCL_INCLUDE_DIR nccl.h
      HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME
      PATH_SUFFIXES include)
    if(MIMO_NCCL_INCLUDE_DIR)
      set(MIMO_HAVE_NCCL ON)
      message(STATUS "mimo: nccl backend on (${MIMO_NCCL_INCLUDE_DIR}/nccl.h)")
    else()
      message(STATUS "mimo: no nccl.h: the nccl backend is not built "
        "(-DMIMO_NCCL_INCLUDE_DIR=DIR names its directory)")
    endif()
  elseif(MIMO_ENABLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MIMO_ENABLE_CUDA=ON but no CUDA compiler was found; "
      "install the CUDA toolkit, put nvcc on PATH (or set CUDACXX), or "
      "configure with -DMIMO_ENABLE_CUDA=OFF")
  else()
    message(STATUS "mimo: no nvcc: the CUDA device is not built")
  endif()
endif()
