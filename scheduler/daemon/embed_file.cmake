# Writes a file's bytes into a C++ source as a std::string_view function, so
# topo-scheduler serves the dashboard with no files at run time.
#
#   cmake -DIN=<file> -DOUT=<file.cpp> -DFUNC=<qualified name> -P embed_file.cmake
if(NOT IN OR NOT OUT OR NOT FUNC)
  message(FATAL_ERROR "usage: cmake -DIN=<file> -DOUT=<file.cpp> -DFUNC=<name> -P embed_file.cmake")
endif()
# A line "@include NAME" in IN is replaced by the file NAME beside it (one level;
# the dashboard's page, its style sheet and its scripts are kept in files of
# their own and served as one page).
file(READ "${IN}" _text)
get_filename_component(_dir "${IN}" DIRECTORY)
string(REGEX MATCHALL "@include [A-Za-z0-9_.-]+" _includes "${_text}")
foreach(_inc IN LISTS _includes)
  string(REPLACE "@include " "" _name "${_inc}")
  if(NOT EXISTS "${_dir}/${_name}")
    message(FATAL_ERROR "${IN}: @include ${_name}: no such file in ${_dir}")
  endif()
  file(READ "${_dir}/${_name}" _part)
  string(REGEX REPLACE "\n$" "" _part "${_part}")
  string(REPLACE "${_inc}" "${_part}" _text "${_text}")
endforeach()
file(WRITE "${OUT}.src" "${_text}")
file(READ "${OUT}.src" _hex HEX)
file(REMOVE "${OUT}.src")
string(LENGTH "${_hex}" _hex_length)
math(EXPR _size "${_hex_length} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," _bytes "${_hex}")
string(REGEX REPLACE "([^,]*,[^,]*,[^,]*,[^,]*,[^,]*,[^,]*,[^,]*,[^,]*,[^,]*,[^,]*,[^,]*,[^,]*,)"
       "\\1\n" _bytes "${_bytes}")
string(REGEX MATCH "^(.*)::([A-Za-z0-9_]+)$" _m "${FUNC}")
set(_ns "${CMAKE_MATCH_1}")
set(_fn "${CMAKE_MATCH_2}")
file(WRITE "${OUT}.tmp"
"// Generated from ${IN} by embed_file.cmake; do not edit.\n"
"#include <string_view>\n"
"namespace ${_ns} {\n"
"namespace {\n"
"const unsigned char kBytes[] = {\n${_bytes}0};\n"
"}  // namespace\n"
"std::string_view ${_fn}() { return std::string_view(reinterpret_cast<const char*>(kBytes), ${_size}); }\n"
"}  // namespace ${_ns}\n")
file(RENAME "${OUT}.tmp" "${OUT}")
