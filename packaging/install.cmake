# cmake --install: the SDK as one shared library (libstagger.so, every
# internal library inside it), its headers, stagger-server, the stagger CLI,
# a CMake package (find_package(stagger) -> stagger::stagger) and a
# pkg-config file.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
# Installed binaries keep the run paths of what they link outside the
# system's directories (CUDA's runtime), as the build tree has them.
set_target_properties(stagger-server stagger_bin PROPERTIES
  INSTALL_RPATH_USE_LINK_PATH ON)

add_library(stagger_shared SHARED packaging/sdk_anchor.cc)
set_target_properties(stagger_shared PROPERTIES
  OUTPUT_NAME stagger
  EXPORT_NAME stagger
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib
  INSTALL_RPATH "$ORIGIN"
  INSTALL_RPATH_USE_LINK_PATH ON)
# The SDK's objects whole (nothing in the anchor references them); what
# they need from the other internal libraries is pulled in as usual.
target_link_libraries(stagger_shared
  PRIVATE -Wl,--whole-archive $<TARGET_FILE:stagger_client>
    $<TARGET_FILE:stagger> -Wl,--no-whole-archive stagger
  PUBLIC absl::status absl::statusor absl::strings)
add_dependencies(stagger_shared stagger stagger_client)
target_include_directories(stagger_shared PUBLIC
  "$<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>"
  "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")

install(TARGETS stagger_shared EXPORT staggerTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY include/stagger DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS stagger-server stagger_bin
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT staggerTargets NAMESPACE stagger::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/stagger)
configure_package_config_file(packaging/staggerConfig.cmake.in
  ${CMAKE_BINARY_DIR}/packaging/staggerConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/stagger)
write_basic_package_version_file(
  ${CMAKE_BINARY_DIR}/packaging/staggerConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/packaging/staggerConfig.cmake
  ${CMAKE_BINARY_DIR}/packaging/staggerConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/stagger)
configure_file(packaging/stagger.pc.in ${CMAKE_BINARY_DIR}/packaging/stagger.pc
  @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/packaging/stagger.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(FILES docs/operations.md docs/format.md README.md
  DESTINATION ${CMAKE_INSTALL_DOCDIR})
# systemd searches <prefix>/lib/systemd/system for /usr and /usr/local.
install(FILES packaging/stagger-server.service
  DESTINATION lib/systemd/system)
