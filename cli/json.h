// anyep/cli/json.h — a JSON value to build results in and write out (no parsing): null, bool,
// number, string, array, object (keys in insertion order).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace anyep::cli {

class Json {
 public:
  enum class Kind { kNull, kBool, kNumber, kInt, kString, kArray, kObject, kRaw };
  Json() = default;
  Json(bool b) : kind_(Kind::kBool), b_(b) {}                           // NOLINT: implicit by design
  Json(double d) : kind_(Kind::kNumber), d_(d) {}                       // NOLINT
  Json(int v) : kind_(Kind::kInt), i_(v) {}                             // NOLINT
  Json(int64_t v) : kind_(Kind::kInt), i_(v) {}                         // NOLINT
  Json(uint64_t v) : kind_(Kind::kInt), i_(static_cast<int64_t>(v)) {}  // NOLINT
  Json(uint32_t v) : kind_(Kind::kInt), i_(v) {}                        // NOLINT
  Json(const char* s) : kind_(Kind::kString), s_(s) {}                  // NOLINT
  Json(std::string s) : kind_(Kind::kString), s_(std::move(s)) {}       // NOLINT
  // JSON text written out as it is (e.g. another program's document).
  static Json raw(std::string text) {
    Json j;
    j.kind_ = Kind::kRaw;
    j.s_ = std::move(text);
    return j;
  }
  static Json array() {
    Json j;
    j.kind_ = Kind::kArray;
    return j;
  }
  static Json object() {
    Json j;
    j.kind_ = Kind::kObject;
    return j;
  }

  Kind kind() const { return kind_; }
  Json& push(Json v);                         // arrays
  Json& set(const std::string& key, Json v);  // objects (replaces an existing key)
  const Json* find(const std::string& key) const;
  const std::vector<Json>& items() const { return items_; }
  const std::string& str() const { return s_; }
  double number() const { return kind_ == Kind::kInt ? static_cast<double>(i_) : d_; }

  // Compact when indent < 0, else pretty with `indent` spaces per level.
  std::string dump(int indent = 1) const;
  // A table cell: numbers with up to 4 significant decimals, strings as they are.
  std::string cell() const;

 private:
  void write(std::string& out, int indent, int depth) const;
  Kind kind_ = Kind::kNull;
  bool b_ = false;
  double d_ = 0;
  int64_t i_ = 0;
  std::string s_;
  std::vector<Json> items_;
  std::vector<std::string> keys_;  // objects: keys_[i] names items_[i]
};

}  // namespace anyep::cli
