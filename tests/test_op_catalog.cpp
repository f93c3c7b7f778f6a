// The op catalog (capsule/backend_ops.def): one entry per BackendOp from which the vocabulary,
// docs/ops.md and the VJP requirements derive. These tests tie it to what the rest of the core
// actually does.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>

#include "capsule/ir.hpp"
#include "capsule/op_catalog.hpp"
#include "conformance/harness.hpp"

using namespace capsule;

TEST(OpCatalog, OneEntryPerBackendOpInEnumOrder) {
    const auto catalog = op_catalog();
    ASSERT_EQ(catalog.size(), kBackendOpCount);
    ASSERT_EQ(all_values<BackendOp>().size(), kBackendOpCount);
    for (std::size_t i = 0; i < catalog.size(); ++i) {
        const auto& e = catalog[i];
        SCOPED_TRACE(std::string(e.spelling()));
        EXPECT_EQ(static_cast<std::size_t>(e.op), i);
        EXPECT_EQ(&op_info(e.op), &e);
        EXPECT_EQ(parse<BackendOp>(e.spelling()), e.op);
        EXPECT_FALSE(e.spec.empty());
        EXPECT_FALSE(e.parents.empty());
        EXPECT_FALSE(e.attributes.empty());
        EXPECT_FALSE(e.follows.empty());
        EXPECT_EQ(e.differentiable(), !op_needs_no_vjp(e.op));
    }
    EXPECT_EQ(op_info(BackendOp::relu).spec, "torch.relu");
    EXPECT_EQ(op_info(BackendOp::equal).no_vjp, "bool results are not differentiated");
    EXPECT_TRUE(is_optimizer_step(BackendOp::adam));
    EXPECT_FALSE(op_info(BackendOp::adam).differentiable());
}

// The conformance suite covers every op the catalog lists: forward cases for each graph op and a
// gradient case for each differentiable one (the optimizer steps are checked by hand in
// test_optimizer.cpp).
TEST(OpCatalog, ConformanceCasesCoverTheCatalog) {
    std::set<BackendOp> forward, gradient;
    for (const auto& c : conformance::all_cases()) {
        forward.insert(c.op);
        if (c.check_gradient) gradient.insert(c.op);
    }
    for (const auto& e : op_catalog()) {
        if (is_optimizer_step(e.op)) continue;
        EXPECT_TRUE(forward.count(e.op)) << "no forward case for " << e.spelling();
        if (e.differentiable()) EXPECT_TRUE(gradient.count(e.op)) << "no gradient case for " << e.spelling();
    }
}

// Every attribute the catalog documents by name is one shape inference accepts, and an op the
// catalog says takes none takes none. Shape inference names its valid attributes when given an
// unknown one: each op is probed with the parents and attributes of its first valid conformance
// case plus an unknown attribute.
TEST(OpCatalog, DocumentedAttributesAreTheOnesShapeInferenceAccepts) {
    const std::regex documented("`([a-z_]+)`:");
    std::map<BackendOp, const conformance::KernelCase*> first_case;
    const auto cases = conformance::all_cases();
    for (const auto& c : cases)
        if (c.expected_error.empty()) first_case.try_emplace(c.op, &c);
    int checked = 0;
    for (const auto& e : op_catalog()) {
        if (is_optimizer_step(e.op)) continue;
        ASSERT_TRUE(first_case.count(e.op)) << e.spelling();
        const auto& c = *first_case.at(e.op);
        Node node;
        node.id = 0;
        node.kind = NodeKind::op;
        node.op = e.op;
        node.attrs = c.attrs;
        node.attrs["zz_probe"] = std::int64_t{0};
        std::vector<TensorType> parents;
        for (const auto& t : c.inputs) parents.push_back({t.shape, t.dtype});
        std::string message;
        try {
            infer_type(node, parents);
        } catch (const Error& err) {
            message = err.what();
        }
        const std::string attributes(e.attributes);
        if (message.find("unknown attribute 'zz_probe' (this op takes none)") != std::string::npos) {
            EXPECT_EQ(attributes, "none") << e.spelling();
            ++checked;
            continue;
        }
        const std::string marker = "unknown attribute 'zz_probe'; valid: ";
        const auto at = message.find(marker);
        if (at == std::string::npos) continue;
        ++checked;
        const std::string valid = ", " + message.substr(at + marker.size()) + ",";
        for (std::sregex_iterator it(attributes.begin(), attributes.end(), documented), end; it != end; ++it)
            EXPECT_NE(valid.find(", " + (*it)[1].str() + ","), std::string::npos)
                << e.spelling() << ": docs/ops.md documents attribute '" << (*it)[1] << "', shape inference accepts"
                << valid;
    }
    EXPECT_EQ(checked, int(kBackendOpCount) - 2) << "shape inference named its valid attributes for only "
                                                  << checked << " ops";
}

TEST(OpCatalog, OpsPageRendersEverySectionAndRefusesUnknownMarkers) {
    std::string tmpl;
    for (auto s : all_values<OpSection>()) tmpl += "<!-- ops: " + std::string(to_string(s)) + " -->\n";
    const auto page = render_ops_markdown(tmpl);
    for (const auto& e : op_catalog())
        EXPECT_NE(page.find("| `" + std::string(e.spelling()) + "` |"), std::string::npos) << e.spelling();
    try {
        render_ops_markdown("<!-- ops: randomness -->\n");
        FAIL() << "an unknown section was accepted";
    } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find("ops template line 1: unknown op section 'randomness'"), std::string::npos)
            << err.what();
    }
    try {
        render_ops_markdown("<!-- ops: random -->\n");
        FAIL() << "a template without every section was accepted";
    } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find("no '<!-- ops: elementwise -->' line"), std::string::npos) << err.what();
    }
}

TEST(OpCatalog, OpsTemplateMarkersToleratCrlfAndRefuseRepeats) {
    std::string tmpl;
    for (auto s : all_values<OpSection>()) tmpl += "<!-- ops: " + std::string(to_string(s)) + " --> \r\n";
    EXPECT_NE(render_ops_markdown(tmpl).find("| `relu` |"), std::string::npos);
    try {
        render_ops_markdown(tmpl + "<!-- ops: random -->\n");
        FAIL() << "a repeated section was accepted";
    } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find("section random appears twice"), std::string::npos) << err.what();
    }
}
