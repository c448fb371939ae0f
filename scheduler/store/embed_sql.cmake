# Writes the schema migrations (schema/sql/NNNN_name.sql) into a C++ source
# file, so topo-scheduler needs no files at run time.
#
#   cmake -DSQL_DIR=<dir> -DOUT=<file.cpp> -P embed_sql.cmake
#
# Checks: names are NNNN_lowercase_name.sql, versions run 1, 2, ... without a
# gap, a file fits in one string literal.
if(NOT SQL_DIR OR NOT OUT)
  message(FATAL_ERROR "usage: cmake -DSQL_DIR=<dir> -DOUT=<file.cpp> -P embed_sql.cmake")
endif()

file(GLOB _files RELATIVE "${SQL_DIR}" "${SQL_DIR}/*.sql")
list(SORT _files)
set(_entries "")
set(_expected 1)
set(_delim "topo_sql")
foreach(_file IN LISTS _files)
  if(NOT _file MATCHES "^([0-9][0-9][0-9][0-9])_([a-z0-9_]+)\\.sql$")
    message(FATAL_ERROR "${SQL_DIR}/${_file}: a migration is named NNNN_name.sql "
                        "(four digits, then lowercase letters, digits and _)")
  endif()
  set(_name "${CMAKE_MATCH_2}")
  math(EXPR _version "${CMAKE_MATCH_1}")
  if(NOT _version EQUAL _expected)
    message(FATAL_ERROR "${SQL_DIR}/${_file}: expected migration version ${_expected} next; "
                        "versions must run 1, 2, 3, ... without gaps or duplicates")
  endif()
  math(EXPR _expected "${_expected} + 1")
  file(READ "${SQL_DIR}/${_file}" _sql)
  string(LENGTH "${_sql}" _length)
  if(_length GREATER 60000)
    message(FATAL_ERROR "${SQL_DIR}/${_file}: ${_length} bytes; split it (at most 60000 per file)")
  endif()
  string(FIND "${_sql}" ")${_delim}\"" _clash)
  if(NOT _clash EQUAL -1)
    message(FATAL_ERROR "${SQL_DIR}/${_file} contains ')${_delim}\"'")
  endif()
  string(APPEND _entries "    {${_version}, \"${_name}\", R\"${_delim}(${_sql})${_delim}\"},\n")
endforeach()
if(_expected EQUAL 1)
  message(FATAL_ERROR "${SQL_DIR}: no migrations (NNNN_name.sql) found")
endif()

set(_content "// Generated from schema/sql by scheduler/store/embed_sql.cmake; do not edit.
#include \"store/migrations.hpp\"

namespace topo::store {
namespace {
constexpr Migration kMigrations[] = {
${_entries}};
}  // namespace

std::span<const Migration> EmbeddedMigrations() { return kMigrations; }

}  // namespace topo::store
")
file(WRITE "${OUT}" "${_content}")
