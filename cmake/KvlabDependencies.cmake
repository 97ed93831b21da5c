# Third-party dependencies, all from Debian 12 packages (see README and .ci/run):
#   libeigen3-dev libboost-program-options-dev libhdf5-dev libgtest-dev
find_package(Eigen3 3.3 REQUIRED NO_MODULE)

# The Python-only build (pip install) links neither Boost nor HDF5.
if(NOT KVLAB_PYTHON_ONLY)
if(KVLAB_STATIC_BOOST)
  set(Boost_USE_STATIC_LIBS ON)
endif()
find_package(Boost 1.74 REQUIRED COMPONENTS program_options CONFIG)

# HDF5 through its C API: the soname (libhdf5_serial.so.103) matches between Debian 12
# (1.10.8) and Ubuntu 24.04 (1.10.10), so a binary built here runs on the GPU machine.
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT TARGET kvlab_hdf5)
  add_library(kvlab_hdf5 INTERFACE)
  if(TARGET hdf5::hdf5)
    target_link_libraries(kvlab_hdf5 INTERFACE hdf5::hdf5)
  else()
    target_include_directories(kvlab_hdf5 INTERFACE ${HDF5_INCLUDE_DIRS})
    target_link_libraries(kvlab_hdf5 INTERFACE ${HDF5_C_LIBRARIES})
    target_compile_definitions(kvlab_hdf5 INTERFACE ${HDF5_DEFINITIONS})
  endif()
endif()

endif()

if(KVLAB_BUILD_TESTS AND NOT KVLAB_PYTHON_ONLY)
  find_package(GTest REQUIRED)
endif()
find_package(Threads REQUIRED)
