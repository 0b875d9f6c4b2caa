# nlohmann-json: Debian's package, or (on machines without it, such as the
# GPU machines, which have only the CUDA toolkit) its header from
# MIMO_JSON_INCLUDE_DIR, which scripts/gpu-bundle.sh fills with the copy
# installed on the development machine.
find_package(nlohmann_json 3.10 QUIET)
if(NOT nlohmann_json_FOUND)
  find_path(MIMO_JSON_INCLUDE_DIR nlohmann/json.hpp
    HINTS "${PROJECT_SOURCE_DIR}/.gpu-bundle/include")
  if(NOT MIMO_JSON_INCLUDE_DIR)
    message(FATAL_ERROR "nlohmann-json not found: install nlohmann-json3-dev, "
      "or set MIMO_JSON_INCLUDE_DIR to a directory holding nlohmann/json.hpp")
  endif()
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  target_include_directories(nlohmann_json::nlohmann_json SYSTEM INTERFACE
    "${MIMO_JSON_INCLUDE_DIR}")
  message(STATUS "mimo: nlohmann-json from ${MIMO_JSON_INCLUDE_DIR}")
endif()
