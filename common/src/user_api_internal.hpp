#pragma once
// What the two halves of the user API's tables share (user_api.cpp: the
// requests; user_api_views.cpp: the views). Not installed.

#include <string>

#include "field_table.hpp"
#include "topo/common/job_io.hpp"
#include "topo/common/user_api.hpp"

namespace topo::common::fields {

// The job spec v1, read and written by job_io.hpp (its own strict reader);
// its schema is schema/job.schema.json's.
struct JobSpecCodec {
  static Status Read(const Json& v, const std::string& path, core::JobSpec& out, Failure& f) {
    Result<core::JobSpec> spec = JobSpecFromJson(v);
    if (!spec.ok()) return Fail(f, path, spec.message());
    out = std::move(spec).value();
    return Status::Ok();
  }
  static OJson Write(const core::JobSpec& spec) { return OJson(JobSpecToJson(spec)); }
  static OJson Schema() { return {{"$ref", "urn:toposched:schema:job:1"}}; }
};

// A message of one of common/'s shared checks (job_process.hpp,
// job_chain.hpp), which starts with the field already: kept as it is.
inline Status FailWith(Failure& f, const std::string& path, const std::string& message) {
  if (message.rfind(path + ":", 0) == 0) {
    f.field = path;
    f.message = message;
    return Status::Error(message);
  }
  return Fail(f, path, message);
}

// The views' schemas (user_api_views.cpp) into ApiSchema's $defs.
void AddViewSchemas(OJson& defs);

}  // namespace topo::common::fields
