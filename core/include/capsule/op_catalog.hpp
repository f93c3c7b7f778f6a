// The op catalog (DESIGN.md section 10, "Evidence is earned"): one entry per BackendOp, written
// once in capsule/backend_ops.def. The BackendOp enum, its spellings and count, which ops need a
// VJP, the `spec` a generated manifest claims to refine, and docs/ops.md all derive from it.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "capsule/vocabulary.hpp"

namespace capsule {

/// The sections of docs/ops.md, in page order.
enum class OpSection : std::uint8_t {
    random, elementwise, logic, reductions, shape, gather, linalg, optimizer, normalisation,
    convolution, pooling, layers
};
template <> struct Spellings<OpSection> {
    static constexpr std::string_view kind = "op section";
    static const std::array<std::pair<OpSection, std::string_view>, 12> values;
};

/// One BackendOp's catalog entry. The text fields are docs/ops.md's columns, in Markdown.
struct OpInfo {
    BackendOp op;
    OpSection section;
    /// "" when the op is differentiable (its capsules need a backward kernel to claim a VJP),
    /// else why it has none (e.g. `bool results are not differentiated`).
    std::string_view no_vjp;
    /// The op whose values the capsules refine (e.g. `torch.nn.functional.gelu`): the `spec` of
    /// generated manifests and of value claims.
    std::string_view spec;
    std::string_view parents;     // e.g. `2 (a, b)`
    std::string_view attributes;  // names, types, defaults and constraints, or `none`
    std::string_view parameters;  // names and shapes, or `—`
    std::string_view output_shape;
    std::string_view dtype;       // the dtype rule: *F*, *any*, bool, ...
    std::string_view follows;     // the one-line definition: the PyTorch/ONNX op and its notes

    std::string_view spelling() const { return to_string(op); }
    bool differentiable() const { return no_vjp.empty(); }
};

/// Every op, in BackendOp order.
std::span<const OpInfo> op_catalog();
/// The entry of `op`.
const OpInfo& op_info(BackendOp op);

/// docs/ops.md from its template: every line `<!-- ops: SECTION -->` (a spelling of OpSection)
/// becomes that section's table (header and one row per op, in catalog order); the rest is
/// copied (a marker may end in blanks or a CR), with `{op_count}` replaced by the number of ops. Raises Error(input) naming the line of an unknown
/// or repeated section, and when a section of the catalog has no marker (an op would be missing
/// from the page).
std::string render_ops_markdown(std::string_view template_text);

}  // namespace capsule
