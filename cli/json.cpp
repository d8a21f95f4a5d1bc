#include "json.h"

#include <cmath>
#include <cstdio>

namespace anyep::cli {

Json& Json::push(Json v) {
  items_.push_back(std::move(v));
  return items_.back();
}

Json& Json::set(const std::string& key, Json v) {
  for (size_t i = 0; i < keys_.size(); ++i)
    if (keys_[i] == key) return items_[i] = std::move(v);
  keys_.push_back(key);
  items_.push_back(std::move(v));
  return items_.back();
}

const Json* Json::find(const std::string& key) const {
  for (size_t i = 0; i < keys_.size(); ++i)
    if (keys_[i] == key) return &items_[i];
  return nullptr;
}

namespace {

void quote(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void newline(std::string& out, int indent, int depth) {
  if (indent < 0) return;
  out += '\n';
  out.append(static_cast<size_t>(indent * depth), ' ');
}

}  // namespace

void Json::write(std::string& out, int indent, int depth) const {
  switch (kind_) {
    case Kind::kNull:
      out += "null";
      return;
    case Kind::kBool:
      out += b_ ? "true" : "false";
      return;
    case Kind::kInt:
      out += std::to_string(i_);
      return;
    case Kind::kNumber: {
      if (!std::isfinite(d_)) {
        out += "null";  // JSON has no NaN or infinity
        return;
      }
      char b[32];
      std::snprintf(b, sizeof b, "%.6g", d_);
      out += b;
      return;
    }
    case Kind::kString:
      quote(out, s_);
      return;
    case Kind::kRaw:
      out += s_;
      return;
    case Kind::kArray:
    case Kind::kObject: {
      const bool obj = kind_ == Kind::kObject;
      out += obj ? '{' : '[';
      // Arrays of plain values stay on one line.
      bool flat = !obj;
      for (const Json& v : items_) flat = flat && v.kind_ != Kind::kArray && v.kind_ != Kind::kObject;
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i) out += ',';
        if (flat) {
          if (i) out += ' ';
        } else {
          newline(out, indent, depth + 1);
        }
        if (obj) {
          quote(out, keys_[i]);
          out += indent < 0 ? ":" : ": ";
        }
        items_[i].write(out, indent, depth + 1);
      }
      if (!flat && !items_.empty()) newline(out, indent, depth);
      out += obj ? '}' : ']';
      return;
    }
  }
}

std::string Json::dump(int indent) const {
  std::string out;
  write(out, indent, 0);
  return out;
}

std::string Json::cell() const {
  char b[32];
  switch (kind_) {
    case Kind::kString:
      return s_;
    case Kind::kInt:
      return std::to_string(i_);
    case Kind::kNumber:
      if (!std::isfinite(d_)) return "-";
      // Whole numbers past 1000 in full, the rest to 4 significant digits.
      std::snprintf(b, sizeof b, std::fabs(d_) >= 1000 && std::fabs(d_) < 1e12 ? "%.0f" : "%.4g", d_);
      return b;
    case Kind::kBool:
      return b_ ? "yes" : "no";
    default:
      return "-";
  }
}

}  // namespace anyep::cli
