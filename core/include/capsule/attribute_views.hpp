// A node's attributes in the plugin C ABI's form (an array of capsule_attribute), as the executor
// and the conformance harness pass them to kernels.
#pragma once

#include <vector>

#include "capsule/ir.hpp"
#include "capsule/plugin_abi.h"

namespace capsule {

/// Owns a copy of the attribute values and the capsule_attribute views that point into it (names,
/// strings and lists are borrowed by the views). Neither copyable nor movable, since the views
/// point into the object itself.
class AttributeViews {
public:
    explicit AttributeViews(const Attributes& attrs);
    AttributeViews(const AttributeViews&) = delete;
    AttributeViews& operator=(const AttributeViews&) = delete;

    const capsule_attribute* data() const { return views_.data(); }
    std::size_t size() const { return views_.size(); }

private:
    Attributes values_;
    std::vector<capsule_attribute> views_;
};

}  // namespace capsule
