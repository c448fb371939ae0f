#include "topo/common/hostlist.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace topo::common {
namespace {

using core::Result;
using core::Status;

// Longest digit string we read as a number; longer ones could overflow.
constexpr size_t kMaxDigits = 18;

struct Range {
  uint64_t first = 0;
  uint64_t last = 0;
  size_t width = 0;  // zero-padding width, from the range start as written
};

// One piece of an item: literal text, or a bracket group of ranges.
struct Piece {
  std::string text;
  std::vector<Range> ranges;
  bool bracket = false;
  uint64_t count = 1;  // names this piece contributes
};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string Quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string Pad(uint64_t value, size_t width) {
  std::string digits = std::to_string(value);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

Result<uint64_t> ParseNumber(std::string_view digits, std::string_view range,
                             std::string_view item) {
  if (digits.empty()) {
    return Status::Error("hostlist item " + Quote(item) + ": range " + Quote(range) +
                         " has an empty bound");
  }
  for (char c : digits) {
    if (!IsDigit(c)) {
      return Status::Error("hostlist item " + Quote(item) + ": range " + Quote(range) +
                           " has a non-digit '" + std::string(1, c) +
                           "'; brackets hold numbers and ranges like [1-4,7]");
    }
  }
  if (digits.size() > kMaxDigits) {
    return Status::Error("hostlist item " + Quote(item) + ": number " + Quote(digits) +
                         " is too long (at most 18 digits)");
  }
  return static_cast<uint64_t>(std::stoull(std::string(digits)));
}

// Parses the inside of one bracket group, "0001-0016,0020".
Result<std::vector<Range>> ParseBracket(std::string_view body, std::string_view item) {
  std::vector<Range> ranges;
  size_t start = 0;
  while (true) {
    size_t comma = body.find(',', start);
    std::string_view part = body.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (part.empty()) {
      return Status::Error("hostlist item " + Quote(item) + ": empty range in [" +
                           std::string(body) + "]");
    }
    size_t dash = part.find('-');
    std::string_view lo = part.substr(0, dash);
    std::string_view hi = dash == std::string_view::npos ? lo : part.substr(dash + 1);
    if (dash != std::string_view::npos && hi.find('-') != std::string_view::npos) {
      return Status::Error("hostlist item " + Quote(item) + ": range " + Quote(part) +
                           " has more than one '-'");
    }
    Result<uint64_t> first = ParseNumber(lo, part, item);
    if (!first.ok()) return first.status();
    Result<uint64_t> last = ParseNumber(hi, part, item);
    if (!last.ok()) return last.status();
    if (last.value() < first.value()) {
      return Status::Error("hostlist item " + Quote(item) + ": range " + Quote(part) +
                           " runs backwards; write it low-high");
    }
    ranges.push_back({first.value(), last.value(), lo.size()});
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return ranges;
}

// Splits one item ("a[1-2]b[3-4]") into literal and bracket pieces.
Result<std::vector<Piece>> ParseItem(std::string_view item) {
  std::vector<Piece> pieces;
  size_t i = 0;
  while (i < item.size()) {
    if (item[i] == '[') {
      size_t close = item.find(']', i + 1);
      // Bracket balance was checked while splitting the expression.
      std::string_view body = item.substr(i + 1, close - i - 1);
      Result<std::vector<Range>> ranges = ParseBracket(body, item);
      if (!ranges.ok()) return ranges.status();
      Piece piece;
      piece.bracket = true;
      piece.ranges = std::move(ranges).value();
      piece.count = 0;
      for (const Range& r : piece.ranges) {
        uint64_t span = r.last - r.first;  // one less than the range's size
        piece.count = span >= UINT64_MAX - piece.count ? UINT64_MAX : piece.count + span + 1;
      }
      pieces.push_back(std::move(piece));
      i = close + 1;
    } else {
      size_t open = item.find('[', i);
      if (open == std::string_view::npos) open = item.size();
      Piece piece;
      piece.text = std::string(item.substr(i, open - i));
      pieces.push_back(std::move(piece));
      i = open;
    }
  }
  return pieces;
}

// Appends the cartesian product of the pieces, first bracket slowest.
void Emit(const std::vector<Piece>& pieces, size_t index, std::string& prefix,
          std::vector<std::string>& out) {
  if (index == pieces.size()) {
    out.push_back(prefix);
    return;
  }
  const Piece& piece = pieces[index];
  size_t keep = prefix.size();
  if (!piece.bracket) {
    prefix += piece.text;
    Emit(pieces, index + 1, prefix, out);
  } else {
    for (const Range& r : piece.ranges) {
      for (uint64_t v = r.first;; ++v) {
        prefix += Pad(v, r.width);
        Emit(pieces, index + 1, prefix, out);
        prefix.resize(keep);
        if (v == r.last) break;
      }
    }
  }
  prefix.resize(keep);
}

// A name split as prefix + trailing digits; digits empty when the name does
// not end in a digit (or the digit run is too long to read as a number).
struct SplitName {
  std::string_view prefix;
  std::string_view digits;
  uint64_t value = 0;
};

SplitName Split(std::string_view name) {
  size_t end = name.size();
  size_t begin = end;
  while (begin > 0 && IsDigit(name[begin - 1])) --begin;
  SplitName split{name, {}, 0};
  if (begin == end || end - begin > kMaxDigits) return split;
  split.prefix = name.substr(0, begin);
  split.digits = name.substr(begin);
  split.value = std::stoull(std::string(split.digits));
  return split;
}

}  // namespace

Result<std::vector<std::string>> ExpandHostlist(std::string_view expr, size_t limit) {
  std::vector<std::string> names;
  if (expr.empty()) return names;

  // Split at top-level commas, checking bracket balance on the way.
  std::vector<std::string_view> items;
  size_t item_start = 0;
  size_t open_at = std::string_view::npos;
  for (size_t i = 0; i <= expr.size(); ++i) {
    char c = i < expr.size() ? expr[i] : ',';
    if (IsSpace(c)) {
      return Status::Error("hostlist " + Quote(expr) + ": whitespace at position " +
                           std::to_string(i) + "; separate names with commas only");
    }
    if (c == '[') {
      if (open_at != std::string_view::npos) {
        return Status::Error("hostlist " + Quote(expr) + ": nested '[' at position " +
                             std::to_string(i) + "; brackets cannot nest");
      }
      open_at = i;
    } else if (c == ']') {
      if (open_at == std::string_view::npos) {
        return Status::Error("hostlist " + Quote(expr) + ": unbalanced ']' at position " +
                             std::to_string(i));
      }
      open_at = std::string_view::npos;
    } else if (c == ',' && (open_at == std::string_view::npos || i == expr.size())) {
      if (open_at != std::string_view::npos) {
        return Status::Error("hostlist " + Quote(expr) + ": unbalanced '[' at position " +
                             std::to_string(open_at) + " is never closed");
      }
      if (i == item_start) {
        return Status::Error("hostlist " + Quote(expr) + ": empty item at position " +
                             std::to_string(i) + " (stray comma)");
      }
      items.push_back(expr.substr(item_start, i - item_start));
      item_start = i + 1;
    }
  }

  uint64_t total = 0;
  for (std::string_view item : items) {
    Result<std::vector<Piece>> pieces = ParseItem(item);
    if (!pieces.ok()) return pieces.status();
    // Count in saturating arithmetic: anything above the limit is an error.
    uint64_t count = 1;
    bool over = false;
    for (const Piece& piece : pieces.value()) {
      if (piece.count > limit || (piece.count != 0 && count > limit / piece.count)) over = true;
      count *= over ? 1 : piece.count;
    }
    if (over || count > limit - total) {
      return Status::Error("hostlist " + Quote(expr) + ": item " + Quote(item) +
                           " takes the expansion past the limit of " + std::to_string(limit) +
                           " names");
    }
    total += count;
    std::string prefix;
    Emit(pieces.value(), 0, prefix, names);
  }
  return names;
}

std::string CompressHostlist(const std::vector<std::string>& names) {
  std::string out;
  size_t i = 0;
  while (i < names.size()) {
    SplitName head = Split(names[i]);
    // The run of names sharing head's prefix and digit width.
    size_t j = i + 1;
    if (!head.digits.empty()) {
      while (j < names.size()) {
        SplitName next = Split(names[j]);
        if (next.digits.empty() || next.prefix != head.prefix ||
            next.digits.size() != head.digits.size()) {
          break;
        }
        ++j;
      }
    }
    if (!out.empty()) out += ',';
    if (j == i + 1) {
      out += names[i];
      i = j;
      continue;
    }
    out += head.prefix;
    out += '[';
    size_t width = head.digits.size();
    size_t k = i;
    bool first_range = true;
    while (k < j) {
      uint64_t lo = Split(names[k]).value;
      uint64_t hi = lo;
      size_t m = k + 1;
      while (m < j && Split(names[m]).value == hi + 1) {
        ++hi;
        ++m;
      }
      if (!first_range) out += ',';
      first_range = false;
      out += Pad(lo, width);
      if (hi != lo) {
        out += '-';
        out += Pad(hi, width);
      }
      k = m;
    }
    out += ']';
    i = j;
  }
  return out;
}

std::string FormatIndexRuns(const std::vector<int64_t>& values) {
  std::string out;
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(values[i]);
    if (j > i) out += "-" + std::to_string(values[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace topo::common
