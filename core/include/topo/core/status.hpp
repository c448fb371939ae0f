#pragma once
// Errors as values. No exception crosses a module boundary of the core.

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace topo::core {

// What kind of error a Status is, for the shells that answer it (the daemon
// maps each to one HTTP status in one place, daemon/api/answer.cpp).
enum class ErrorCode : uint8_t {
  kOk,
  kInvalid,               // the input is wrong: the message names the field and the fix
  kNotFound,              // no such thing (or none the caller may see)
  kForbidden,             // the caller may not do this
  kConflict,              // not in this state
  kUnavailable,           // a dependency failed or is not there now: retry later
  kInsufficientStorage,   // the disk is too full to write
  kUnauthenticated,       // no valid credentials
  kRateLimited,           // too many requests: retry later
  kInfeasible,            // well formed, but it can never be done here (a job that never fits)
  kMethodNotAllowed,      // the thing exists, but not this operation on it
  kTooLarge,              // the input is larger than its limit
  kUnsupportedMediaType,  // the input is not in a format that is read
  kTimedOut,              // a dependency did not answer in time
  kInternal,              // a bug: nothing was changed
};

// A success, or an error with a message written for the person who caused it:
// it names the field or line and the fix.
class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  // An error; kInvalid unless said otherwise.
  static Status Error(std::string message, ErrorCode code = ErrorCode::kInvalid) {
    return Status(std::move(message), code == ErrorCode::kOk ? ErrorCode::kInvalid : code);
  }
  // The same error naming the input field at fault ("spec.gpus"), for
  // answers that carry it apart from the message.
  Status WithField(std::string field) && {
    field_ = std::move(field);
    return std::move(*this);
  }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::string& field() const { return field_; }

 private:
  Status(std::string message, ErrorCode code) : message_(std::move(message)), code_(code) {}
  std::string message_;
  std::string field_;
  ErrorCode code_ = ErrorCode::kOk;
};

// A value or the Status that explains why there is none.
// REQUIRES: value() only when ok(); status() is Ok when ok().
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : data_(std::move(status)) {}  // NOLINT

  bool ok() const { return std::holds_alternative<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T& value() & { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(data_); }
  const std::string& message() const {
    static const std::string kEmpty;
    return ok() ? kEmpty : std::get<Status>(data_).message();
  }

 private:
  std::variant<T, Status> data_;
};

}  // namespace topo::core
