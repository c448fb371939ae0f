#pragma once
// Errors as values. No exception crosses a module boundary of the core.

#include <string>
#include <utility>
#include <variant>

namespace topo::core {

// A success, or an error with a message written for the person who caused it:
// it names the field or line and the fix.
class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message), true); }

  bool ok() const { return !error_; }
  const std::string& message() const { return message_; }

 private:
  Status(std::string message, bool error) : message_(std::move(message)), error_(error) {}
  std::string message_;
  bool error_ = false;
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
