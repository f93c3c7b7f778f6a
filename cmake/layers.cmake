# The layer map that tools/check_layers.py checks: every source and header of each layer's
# targets, one `<layer>\t<file>` line each, written at configure time from the targets' source
# lists and HEADERS file sets. Plugins may include only the ABI.
set(capsule_layer_map ${CMAKE_BINARY_DIR}/capsule_layers.txt)
get_property(capsule_fixture_plugins GLOBAL PROPERTY CAPSULE_FIXTURE_TARGETS)
set(capsule_layers
  abi capsule_abi
  core capsule_core
  runtime capsule_runtime
  onnx capsule_onnx
  c capsule_c
  training capsule_training
  tool capsule)
foreach(plugin capsule_reference capsule_onednn capsule_native_cuda example ${capsule_fixture_plugins})
  list(APPEND capsule_layers plugin ${plugin})
endforeach()

set(capsule_layer_lines "")
while(capsule_layers)
  list(POP_FRONT capsule_layers layer target)
  if(NOT TARGET ${target})
    continue()
  endif()
  get_target_property(dir ${target} SOURCE_DIR)
  set(files "")
  foreach(property SOURCES HEADER_SET)
    get_target_property(listed ${target} ${property})
    if(listed)
      list(APPEND files ${listed})
    endif()
  endforeach()
  foreach(file IN LISTS files)
    if(file MATCHES "^\\$<")
      continue()
    endif()
    cmake_path(ABSOLUTE_PATH file BASE_DIRECTORY ${dir} NORMALIZE)
    string(APPEND capsule_layer_lines "${layer}\t${file}\n")
  endforeach()
endwhile()
file(WRITE ${capsule_layer_map} "${capsule_layer_lines}")

find_package(Python3 COMPONENTS Interpreter REQUIRED)
add_test(NAME layering
         COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/check_layers.py ${capsule_layer_map}
                 --header-dir ${PROJECT_SOURCE_DIR}/core/include/capsule
                 --header-dir ${PROJECT_SOURCE_DIR}/tools/training/include/capsule)
set_tests_properties(layering PROPERTIES LABELS packaging)
