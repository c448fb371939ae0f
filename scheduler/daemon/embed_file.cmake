# Writes a file's bytes into a C++ source as a std::string_view function, so
# topo-scheduler serves the dashboard with no files at run time.
#
#   cmake -DIN=<file> -DOUT=<file.cpp> -DFUNC=<qualified name> -P embed_file.cmake
if(NOT IN OR NOT OUT OR NOT FUNC)
  message(FATAL_ERROR "usage: cmake -DIN=<file> -DOUT=<file.cpp> -DFUNC=<name> -P embed_file.cmake")
endif()
file(READ "${IN}" _hex HEX)
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
