#include "capsule/op_catalog.hpp"

#include <set>
#include <sstream>

namespace capsule {

const std::array<std::pair<OpSection, std::string_view>, 12> Spellings<OpSection>::values{{
    {OpSection::random, "random"}, {OpSection::elementwise, "elementwise"},
    {OpSection::logic, "logic"}, {OpSection::reductions, "reductions"},
    {OpSection::shape, "shape"}, {OpSection::gather, "gather"}, {OpSection::linalg, "linalg"},
    {OpSection::optimizer, "optimizer"}, {OpSection::normalisation, "normalisation"},
    {OpSection::convolution, "convolution"}, {OpSection::pooling, "pooling"},
    {OpSection::layers, "layers"},
}};

namespace {

constexpr OpInfo kCatalog[] = {
#define CAPSULE_BACKEND_OP(name, section, no_vjp, spec, parents, attributes, parameters, output,  \
                           dtype, follows)                                                      \
    {BackendOp::name, OpSection::section, no_vjp, spec, parents, attributes, parameters, output, \
     dtype, follows},
#include "capsule/backend_ops.def"
#undef CAPSULE_BACKEND_OP
};
static_assert(std::size(kCatalog) == kBackendOpCount);

constexpr bool in_enum_order() {
    for (std::size_t i = 0; i < std::size(kCatalog); ++i)
        if (static_cast<std::size_t>(kCatalog[i].op) != i) return false;
    return true;
}
static_assert(in_enum_order(), "backend_ops.def lists each op once, in enum order");

/// Pooling and the optimizer steps have no parameters and describe shapes in their section's
/// text, so their tables have four columns.
bool short_table(OpSection s) { return s == OpSection::pooling || s == OpSection::optimizer; }

std::string table(OpSection section) {
    std::ostringstream out;
    if (short_table(section)) {
        out << "| op | " << (section == OpSection::optimizer ? "inputs → outputs" : "parents")
            << " | attributes | follows |\n|---|---|---|---|\n";
    } else {
        out << "| op | parents | attributes | parameters | output shape | dtype | follows |\n"
               "|---|---|---|---|---|---|---|\n";
    }
    for (const auto& e : kCatalog) {
        if (e.section != section) continue;
        out << "| `" << e.spelling() << "` | " << e.parents << " | " << e.attributes << " | ";
        if (!short_table(section))
            out << e.parameters << " | " << e.output_shape << " | " << e.dtype << " | ";
        out << e.follows << " |\n";
    }
    return out.str();
}

}  // namespace

std::span<const OpInfo> op_catalog() { return kCatalog; }

const OpInfo& op_info(BackendOp op) { return kCatalog[static_cast<std::size_t>(op)]; }

std::string render_ops_markdown(std::string_view text) {
    constexpr std::string_view open = "<!-- ops: ", close = " -->";
    std::string out;
    std::set<OpSection> rendered;
    std::size_t line_no = 0;
    for (std::size_t pos = 0; pos < text.size();) {
        auto end = text.find('\n', pos);
        if (end == std::string_view::npos) end = text.size();
        const std::string_view line = text.substr(pos, end - pos);
        ++line_no;
        // A marker is matched without trailing blanks or a CR (a template saved with CRLF).
        std::string_view marker = line;
        while (!marker.empty() && (marker.back() == ' ' || marker.back() == '\t' || marker.back() == '\r'))
            marker.remove_suffix(1);
        if (marker.starts_with(open) && marker.ends_with(close)) {
            const auto name = marker.substr(open.size(), marker.size() - open.size() - close.size());
            OpSection section;
            try {
                section = parse<OpSection>(name);
            } catch (const Error& e) {
                throw Error(ErrorCode::input, "ops template line " + std::to_string(line_no) + ": " + e.what());
            }
            if (!rendered.insert(section).second)
                throw Error(ErrorCode::input, "ops template line " + std::to_string(line_no) + ": section " +
                                                  std::string(name) + " appears twice");
            out += table(section);
        } else {
            // `{op_count}` in prose is the catalog's size, so that no page repeats it by hand.
            constexpr std::string_view count_marker = "{op_count}";
            std::string prose(line);
            for (auto at = prose.find(count_marker); at != std::string::npos; at = prose.find(count_marker, at))
                prose.replace(at, count_marker.size(), std::to_string(std::size(kCatalog)));
            out += prose;
            out += '\n';
        }
        pos = end + 1;
    }
    for (auto section : all_values<OpSection>())
        if (!rendered.count(section))
            throw Error(ErrorCode::input, "ops template has no '<!-- ops: " + std::string(to_string(section)) +
                                              " -->' line: its ops would be missing from the page");
    return out;
}

}  // namespace capsule
