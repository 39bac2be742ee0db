# `cmake --install <build> [--prefix P]` lays trainmem out as a package that
# find_package(Trainmem) finds (docs/WritingAPass.md):
#   bin/                       trainmem-opt, trainmem-model, trainmem-run
#   include/trainmem/          headers, TableGen sources (.td) and the
#                              generated declarations (.inc)
#   include/trainmem-runtime/  the runtime's C ABI
#   lib/                       the libraries (static)
#   lib/cmake/trainmem/        TrainmemConfig.cmake, TrainmemTargets.cmake
include(CMakePackageConfigHelpers)

# Headers only: what a pass plugin compiles against. A plugin links nothing
# of trainmem: trainmem-opt exports its symbols (tools/trainmem-opt), and the
# plugin's references to the dialect, its TypeIDs and the analyses bind to
# the one copy in the tool that loads it.
add_library(TrainmemHeaders INTERFACE)
target_include_directories(TrainmemHeaders INTERFACE
  $<BUILD_INTERFACE:${TRAINMEM_SOURCE_DIR}/include>
  $<BUILD_INTERFACE:${TRAINMEM_BINARY_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
install(TARGETS TrainmemHeaders EXPORT ${TRAINMEM_EXPORT_SET})

install(DIRECTORY ${TRAINMEM_SOURCE_DIR}/include/trainmem
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h" PATTERN "*.td" PATTERN "*.def")
install(DIRECTORY ${TRAINMEM_BINARY_DIR}/include/trainmem
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.inc"
  PATTERN "CMakeFiles" EXCLUDE)

# The installed tools find libMLIR and libLLVM where they were linked from.
set_target_properties(trainmem-opt trainmem-model trainmem-run trainmem-plan PROPERTIES
  INSTALL_RPATH_USE_LINK_PATH ON)
install(TARGETS trainmem-opt trainmem-model trainmem-run trainmem-plan
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

set(TRAINMEM_INSTALL_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/trainmem)
install(EXPORT ${TRAINMEM_EXPORT_SET}
  FILE TrainmemTargets.cmake
  NAMESPACE Trainmem::
  DESTINATION ${TRAINMEM_INSTALL_CMAKE_DIR})

configure_package_config_file(
  ${TRAINMEM_SOURCE_DIR}/cmake/TrainmemConfig.cmake.in
  ${TRAINMEM_BINARY_DIR}/cmake/TrainmemConfig.cmake
  INSTALL_DESTINATION ${TRAINMEM_INSTALL_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(
  ${TRAINMEM_BINARY_DIR}/cmake/TrainmemConfigVersion.cmake
  VERSION ${TRAINMEM_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${TRAINMEM_BINARY_DIR}/cmake/TrainmemConfig.cmake
  ${TRAINMEM_BINARY_DIR}/cmake/TrainmemConfigVersion.cmake
  DESTINATION ${TRAINMEM_INSTALL_CMAKE_DIR})
