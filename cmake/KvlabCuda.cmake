# CUDA detection. Sets KVLAB_HAVE_CUDA (ON/OFF).
#
# The architecture list is explicit (never `native`: that fails at configure time on a
# machine without a GPU). Default: 90 (H100/H200). CUDA 13 supports sm_75 and newer only.
# Every extra architecture multiplies the CUDA compile time, which CI pays on 2 cores.
string(TOUPPER "${KVLAB_CUDA}" _kvlab_cuda)
set(KVLAB_HAVE_CUDA OFF)
if(NOT _kvlab_cuda STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
      set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures (explicit list)" FORCE)
    endif()
    if(CMAKE_CUDA_ARCHITECTURES MATCHES "native|all")
      message(FATAL_ERROR "CMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES}: kvlab needs an explicit list such as 90 or 80;90")
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(KVLAB_HAVE_CUDA ON)
  elseif(_kvlab_cuda STREQUAL "ON")
    message(FATAL_ERROR "KVLAB_CUDA=ON but no CUDA compiler was found (install the CUDA toolkit or use -DKVLAB_CUDA=OFF)")
  else()
    message(STATUS "kvlab: no CUDA compiler found, building the CPU-only configuration")
  endif()
endif()
