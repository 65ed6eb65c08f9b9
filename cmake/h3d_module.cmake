# h3d_module(NAME SOURCES ... [DEPENDS mod...] [PRIVATE_DEPENDS mod...]
#            [LIBS target...] [PRIVATE_LIBS target...])
#
# One layer of the house (docs/architecture.md, "Layers") as the static
# library h3d_NAME built from the folder src/hybrid3d/NAME (or, for the
# command line, apps/hybrid3d). DEPENDS are the layers whose headers this
# layer's own headers include (they travel to whoever uses this one);
# PRIVATE_DEPENDS the layers only its .cpp files include. LIBS and
# PRIVATE_LIBS are outside libraries, likewise.
#
# Each call also records the layer, its folder and its arrows; the
# top-level CMakeLists.txt writes them to ${PROJECT_BINARY_DIR}/layers.json,
# which tests/layers/check_includes.py holds every #include against: a file
# may include its own layer's headers and those of the layers it names
# here, nothing else (the arrows the build sees are the only ones allowed).
function(h3d_module name)
  cmake_parse_arguments(M "" "FOLDER" "SOURCES;DEPENDS;PRIVATE_DEPENDS;LIBS;PRIVATE_LIBS" ${ARGN})
  if(NOT M_FOLDER)
    file(RELATIVE_PATH M_FOLDER ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  endif()
  add_library(h3d_${name} STATIC ${M_SOURCES})
  target_include_directories(h3d_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(h3d_${name} PRIVATE -Wall -Wextra)
  set_target_properties(h3d_${name} PROPERTIES CXX_EXTENSIONS OFF)
  foreach(d IN LISTS M_DEPENDS)
    target_link_libraries(h3d_${name} PUBLIC h3d_${d})
  endforeach()
  foreach(d IN LISTS M_PRIVATE_DEPENDS)
    target_link_libraries(h3d_${name} PRIVATE h3d_${d})
  endforeach()
  target_link_libraries(h3d_${name} PUBLIC ${M_LIBS} PRIVATE ${M_PRIVATE_LIBS})
  string(JOIN "\", \"" pub ${M_DEPENDS})
  string(JOIN "\", \"" priv ${M_PRIVATE_DEPENDS})
  if(pub)
    set(pub "\"${pub}\"")
  endif()
  if(priv)
    set(priv "\"${priv}\"")
  endif()
  set_property(GLOBAL APPEND PROPERTY H3D_LAYERS
    "\"${name}\": {\"folder\": \"${M_FOLDER}\", \"depends\": [${pub}], \"private_depends\": [${priv}]}")
endfunction()

# Writes the layers recorded so far to FILE (JSON).
function(h3d_write_layers file)
  get_property(layers GLOBAL PROPERTY H3D_LAYERS)
  string(JOIN ",\n  " body ${layers})
  file(WRITE ${file} "{\n  ${body}\n}\n")
endfunction()
