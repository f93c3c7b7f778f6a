#include "capsule/attribute_views.hpp"

namespace capsule {

AttributeViews::AttributeViews(const Attributes& attrs) : values_(attrs) {
    views_.reserve(values_.size());
    for (const auto& [name, value] : values_) {
        capsule_attribute a{};
        a.struct_size = sizeof a;
        a.name = name.c_str();
        if (auto* i = std::get_if<std::int64_t>(&value)) {
            a.kind = CAPSULE_ATTR_INT;
            a.int_value = *i;
        } else if (auto* d = std::get_if<double>(&value)) {
            a.kind = CAPSULE_ATTR_FLOAT;
            a.float_value = *d;
        } else if (auto* b = std::get_if<bool>(&value)) {
            a.kind = CAPSULE_ATTR_BOOL;
            a.int_value = *b ? 1 : 0;
        } else if (auto* s = std::get_if<std::string>(&value)) {
            a.kind = CAPSULE_ATTR_STRING;
            a.string_value = s->c_str();
        } else if (auto* is = std::get_if<std::vector<std::int64_t>>(&value)) {
            a.kind = CAPSULE_ATTR_INTS;
            a.ints = is->data();
            a.count = is->size();
        } else if (auto* fs = std::get_if<std::vector<double>>(&value)) {
            a.kind = CAPSULE_ATTR_FLOATS;
            a.floats = fs->data();
            a.count = fs->size();
        }
        views_.push_back(a);
    }
}

}  // namespace capsule
