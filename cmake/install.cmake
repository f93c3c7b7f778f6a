# `cmake --install`: headers, the layered libraries, the C API library (libcapsule_c), the
# `capsule` tool, the plugins with their manifests (stubs included), the built-in profiles, a CMake
# package (find_package(capsule), targets capsule::abi, capsule::core, capsule::runtime, capsule::c
# and, as component `onnx`, capsule::onnx) and pkg-config files (`capsule` for the C++ runtime,
# `capsule-c` for the C API). Directories are created rwxr-xr-x whatever the umask: the plugin
# host refuses plugin files under group- or world-writable directories.
include(CMakePackageConfigHelpers)
set(CMAKE_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS
    OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)

install(TARGETS capsule_abi capsule_core capsule_runtime capsule_c EXPORT capsuleTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        FILE_SET HEADERS DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT capsuleTargets NAMESPACE capsule:: DESTINATION ${CAPSULE_INSTALL_CMAKEDIR})
if(TARGET capsule_onnx)
  install(TARGETS capsule_onnx EXPORT capsuleOnnxTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          FILE_SET HEADERS DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT capsuleOnnxTargets NAMESPACE capsule:: DESTINATION ${CAPSULE_INSTALL_CMAKEDIR})
endif()

# capsule_manifest_gen: vendors generate their manifests from their libraries (docs/plugins.md).
install(TARGETS capsule capsule_manifest_gen RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# `capsule serve` runs capsule-serve from the directory that holds `capsule`.
if(TARGET capsule_serve)
  install(TARGETS capsule_serve RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
if(TARGET capsule_onnx_import)
  install(TARGETS capsule_onnx_import LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/capsule)
endif()

# Plugins: every library built into the plugin directory and every manifest there (the build
# copies exactly the manifests this build should plan with, stubs included).
foreach(plugin capsule_reference capsule_onednn capsule_libtorch capsule_libtorch_autograd capsule_native_cuda)
  if(TARGET ${plugin})
    install(TARGETS ${plugin} LIBRARY DESTINATION ${CAPSULE_INSTALL_PLUGINDIR})
  endif()
endforeach()
install(DIRECTORY ${CAPSULE_PLUGIN_OUTPUT_DIR}/ DESTINATION ${CAPSULE_INSTALL_PLUGINDIR}
        FILES_MATCHING PATTERN "*.capsule.json")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/profiles/ DESTINATION ${CAPSULE_INSTALL_PROFILEDIR}
        FILES_MATCHING PATTERN "*.json")

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/capsuleConfig.cmake.in
  ${CMAKE_BINARY_DIR}/capsuleConfig.cmake
  INSTALL_DESTINATION ${CAPSULE_INSTALL_CMAKEDIR}
  PATH_VARS CAPSULE_INSTALL_PLUGINDIR CAPSULE_INSTALL_PROFILEDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/capsuleConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/capsuleConfig.cmake ${CMAKE_BINARY_DIR}/capsuleConfigVersion.cmake
        DESTINATION ${CAPSULE_INSTALL_CMAKEDIR})

# pkg-config: capsule::runtime and what it brings. Static libraries list their own dependencies
# in Libs and Requires; shared ones keep them private.
get_target_property(capsule_runtime_type capsule_runtime TYPE)
if(capsule_runtime_type STREQUAL "STATIC_LIBRARY")
  set(CAPSULE_PC_REQUIRES "nlohmann_json nettle simdjson")
  set(CAPSULE_PC_REQUIRES_PRIVATE "")
  set(CAPSULE_PC_LIBS_DEPS "${CMAKE_DL_LIBS}" "-pthread")
  list(TRANSFORM CAPSULE_PC_LIBS_DEPS REPLACE "^dl$" "-ldl")
  list(JOIN CAPSULE_PC_LIBS_DEPS " " CAPSULE_PC_LIBS_DEPS)
  set(CAPSULE_PC_LIBS_PRIVATE "")
else()
  set(CAPSULE_PC_REQUIRES "nlohmann_json")
  set(CAPSULE_PC_REQUIRES_PRIVATE "nettle simdjson")
  set(CAPSULE_PC_LIBS_DEPS "")
  set(CAPSULE_PC_LIBS_PRIVATE "-ldl -pthread")
endif()
file(RELATIVE_PATH CAPSULE_PC_PREFIX_FROM_PCDIR
     ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" CAPSULE_PC_PREFIX_FROM_PCDIR "${CAPSULE_PC_PREFIX_FROM_PCDIR}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/capsule.pc.in ${CMAKE_BINARY_DIR}/capsule.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/capsule.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
# The C API is one shared library whose dependencies are its own (no Requires, no Libs.private).
configure_file(${CMAKE_CURRENT_LIST_DIR}/capsule-c.pc.in ${CMAKE_BINARY_DIR}/capsule-c.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/capsule-c.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
