// The one strict JSON reader behind every document the runtime reads: a repeated key is an error
// naming the file, the JSON path and the key (never "the last one wins"), and a number outside
// the range of a double is an Error(input) naming the file and path (never a raw json exception).
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "../core/src/json_reader.hpp"
#include "capsule/tensor_io.hpp"
#include "capsule_fixtures.hpp"
#include "fuzz/json_same.hpp"

using namespace capsule;
using namespace capsule::testing;
using capsule::testing::same;
namespace fs = std::filesystem;

namespace {

/// Replaces the first occurrence of `what` in `text` (which must hold it) by `with`.
std::string replace_first(std::string text, const std::string& what, const std::string& with) {
    const auto at = text.find(what);
    EXPECT_NE(at, std::string::npos) << what << " not in " << text;
    if (at != std::string::npos) text.replace(at, what.size(), with);
    return text;
}

/// A valid one-capsule manifest as compact JSON text (keys in sorted order).
std::string manifest_text() {
    return manifest_to_json(make_manifest("demo", {make_capsule("demo.relu", BackendOp::relu)})).dump();
}

/// The type of exception `f` raises and its message.
template <typename F>
std::pair<std::string, std::string> raised(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return {std::string("Error(") + to_string(e.code()) + ")", e.what()};
    } catch (const nlohmann::json::exception& e) {
        return {"json::exception", e.what()};
    } catch (const std::exception& e) {
        return {"std::exception", e.what()};
    }
    return {"nothing", ""};
}

const char* kGraphHead = R"({"format": "capsule-ir", "version": 1, "nodes": [)"
                         R"({"id": 0, "op": "input", "name": "x", "shape": [2]}, )";

}  // namespace

TEST(StrictJson, ParsesLikeNlohmannWhenNoKeyRepeats) {
    const std::string text =
        R"({"a": [1, -2, 3.5, true, null, "s", {"b": {}}], "c": {"d": [[], [{}]]}, "u": 18446744073709551615})";
    EXPECT_EQ(detail::parse_json_text(text, "t.json"), nlohmann::json::parse(text));
    EXPECT_EQ(detail::parse_json_text("7", "t.json"), nlohmann::json(7));
    // The same key in different objects is fine.
    EXPECT_EQ(detail::parse_json_text(R"([{"k": 1}, {"k": 2}, {"o": {"k": 3}}])", "t.json")[2]["o"]["k"], 3);
}

TEST(StrictJson, RepeatedKeyNamesFilePathAndKey) {
    struct Case { std::string text, expected; };
    const Case cases[] = {
        {R"({"a": 1, "a": 1})", "t.json: $.a: duplicate key 'a' (each key may appear once in an object)"},
        {R"({"a": {"b": [0, {"c": 1, "d": 2, "c": 3}]}})", "t.json: $.a.b[1].c: duplicate key 'c'"},
        {R"([[], [{"x": 1}, {"y": {"z": 1, "z": 1}}]])", "t.json: $[1][1].y.z: duplicate key 'z'"},
        {R"({"odd key": 1, "odd key": 2})", "t.json: $['odd key']: duplicate key 'odd key'"},
        {R"({"": 1, "": 2})", "t.json: $['']: duplicate key ''"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.text);
        auto [type, msg] = raised([&] { detail::parse_json_text(c.text, "t.json"); });
        EXPECT_EQ(type, "Error(input)");
        EXPECT_EQ(msg.rfind(c.expected, 0), 0u) << msg;
    }
}

TEST(StrictJson, NumberOutOfRangeIsAnInputErrorWithItsPath) {
    struct Case { std::string text, expected; };
    const Case cases[] = {
        {"1e400", "t.json: $: number overflow: '1e400' is outside the range of a double"},
        {R"({"a": [1, -1e400]})", "t.json: $.a[1]: number overflow: '-1e400'"},
        {R"({"a": {"b": 1E+999}})", "t.json: $.a.b: number overflow: '1E+999'"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.text);
        auto [type, msg] = raised([&] { detail::parse_json_text(c.text, "t.json"); });
        EXPECT_EQ(type, "Error(input)");
        EXPECT_EQ(msg.rfind(c.expected, 0), 0u) << msg;
    }
    // Tiny numbers underflow to zero, as strtod does; that is not an error.
    EXPECT_EQ(detail::parse_json_text("1e-400", "t.json").get<double>(), 0.0);
}

TEST(StrictJson, SyntaxErrorsStayMalformedJson) {
    for (const std::string text : {"", "{", "{\"a\": }", "[1, 2", "\"\xff\"", "{\"a\" 1}"}) {
        SCOPED_TRACE(text);
        auto [type, msg] = raised([&] { detail::parse_json_text(text, "t.json"); });
        EXPECT_EQ(type, "Error(input)");
        EXPECT_EQ(msg.rfind("t.json: malformed JSON: ", 0), 0u) << msg;
    }
    // Deep nesting is read without recursion.
    EXPECT_EQ(detail::parse_json_text(std::string(100000, '[') + std::string(100000, ']'), "t.json").size(), 1u);
}

TEST(StrictJson, StreamedArrayDeliversEachElementOnceInOrder) {
    std::vector<std::pair<std::size_t, nlohmann::json>> got;
    const detail::StreamedArray stream{"items", [&](const nlohmann::json& e, std::size_t i) { got.emplace_back(i, e); }};
    const auto doc = detail::parse_json_text(
        R"({"before": {"items": [9]}, "items": [1, {"a": [2, {"items": [3]}]}, [], "s"], "after": 4})", "t.json",
        stream);
    // Only the top-level member is streamed; it is left empty in the document.
    EXPECT_EQ(doc, nlohmann::json::parse(R"({"before": {"items": [9]}, "items": [], "after": 4})"));
    ASSERT_EQ(got.size(), 4u);
    EXPECT_EQ(got[0], (std::pair<std::size_t, nlohmann::json>{0, 1}));
    EXPECT_EQ(got[1].first, 1u);
    EXPECT_EQ(got[1].second, nlohmann::json::parse(R"({"a": [2, {"items": [3]}]})"));
    EXPECT_EQ(got[2], (std::pair<std::size_t, nlohmann::json>{2, nlohmann::json::array()}));
    EXPECT_EQ(got[3], (std::pair<std::size_t, nlohmann::json>{3, "s"}));
    // Paths inside the streamed array count the elements already delivered.
    EXPECT_EQ(error_of([&] { detail::parse_json_text(R"({"items": [{}, 1, {"k": 1, "k": 2}]})", "t.json", stream); }),
              "t.json: $.items[2].k: duplicate key 'k' (each key may appear once in an object)");
    EXPECT_EQ(error_of([&] { detail::parse_json_text(R"({"items": [0, 1, 2, 1e999]})", "t.json", stream); }),
              "t.json: $.items[3]: number overflow: '1e999' is outside the range of a double");
    // A root that is not an object streams nothing.
    got.clear();
    EXPECT_EQ(detail::parse_json_text(R"([{"items": [1]}])", "t.json", stream).size(), 1u);
    EXPECT_TRUE(got.empty());
}

TEST(StrictJson, GraphNodeErrorsKeepTheirOrderWhenNodesAreStreamed) {
    // A bad node is reported after the top-level checks, as when the whole document is read.
    EXPECT_EQ(error_of([] {
                  parse_graph(R"({"format": "capsule-ir", "version": 2, "nodes": [{"id": "x"}], "outputs": []})", "g.json");
              }),
              "g.json: $.version: unsupported version 2; this runtime reads version 1");
    EXPECT_EQ(error_of([] {
                  parse_graph(std::string(kGraphHead) + R"({"id": 1, "op": "relux", "shape": [2]}, {"id": 2}], "outputs": [1]})", "g.json");
              }).rfind("g.json: node 1: unknown op 'relux'", 0),
              0u);
    // A syntax error anywhere wins over a bad node before it.
    EXPECT_EQ(error_of([] { parse_graph(std::string(kGraphHead) + R"({"id": 1, "op": "relux", "shape": [2]}], "outputs": [1)", "g.json"); })
                  .rfind("g.json: malformed JSON", 0),
              0u);
    auto g = parse_graph(std::string(kGraphHead) + R"({"id": 1, "op": "relu", "parents": [0], "shape": [2]}], "outputs": [1]})", "g.json");
    ASSERT_EQ(g.nodes.size(), 2u);
    EXPECT_EQ(g.nodes[0].name, "x");
    EXPECT_EQ(g.nodes[1].parents, (std::vector<std::int64_t>{0}));
}

TEST(StrictJson, ManifestWithRepeatedTrustOrEvidenceIsRefused) {
    const auto text = manifest_text();
    // The attack: a fuzzed capsule that also claims to be verified, last one wins in nlohmann.
    auto trust = replace_first(text, R"("trust":"checked")", R"("trust":"fuzzed","trust":"verified")");
    EXPECT_EQ(error_of([&] { parse_manifest(trust, "demo.capsule.json"); }),
              "demo.capsule.json: $.capsules[0].trust: duplicate key 'trust' (each key may appear "
              "once in an object)");
    // Evidence inside contracts (keys are sorted: layout comes first).
    auto evidence = replace_first(text, R"("evidence":"runtime-guard")",
                                  R"("evidence":"fuzz-oracle","evidence":"theorem")");
    EXPECT_EQ(error_of([&] { parse_manifest(evidence, "demo.capsule.json"); }),
              "demo.capsule.json: $.capsules[0].contracts.layout.evidence: duplicate key "
              "'evidence' (each key may appear once in an object)");
    // The same manifest without the repetition loads.
    EXPECT_EQ(parse_manifest(text, "demo.capsule.json").capsules.at(0).trust, TrustLevel::checked);
}

TEST(StrictJson, ManifestWithHugeNumberIsAnInputErrorNamingTheFile) {
    auto text = replace_first(manifest_text(), R"("priority":0)", R"("priority":1e400)");
    auto [type, msg] = raised([&] { parse_manifest(text, "demo.capsule.json"); });
    EXPECT_EQ(type, "Error(input)");
    EXPECT_EQ(msg, "demo.capsule.json: $.priority: number overflow: '1e400' is outside the range of a double");
}

TEST(StrictJson, ProfileWithRepeatedKeyOrHugeNumberIsRefused) {
    EXPECT_EQ(error_of([] {
                  profile_from_json(R"({"name": "x", "base": "checked_cpu", "lowering_mode": "singleton",
                                        "lowering_mode": "coalesced"})",
                                    "p.json");
              }),
              "p.json: $.lowering_mode: duplicate key 'lowering_mode' (each key may appear once in an object)");
    EXPECT_EQ(error_of([] {
                  profile_from_json(R"({"name": "x", "base": "checked_cpu",
                                        "config": {"trust_policy": "verified-only", "trust_policy": "trusted-external-ok"}})",
                                    "p.json");
              }),
              "p.json: $.config.trust_policy: duplicate key 'trust_policy' (each key may appear once in an object)");
    auto [type, msg] = raised([] {
        profile_from_json(R"({"name": "x", "base": "checked_cpu", "acceptance_policy": {"require_evidence": 1e400}})",
                          "p.json");
    });
    EXPECT_EQ(type, "Error(input)");
    EXPECT_EQ(msg, "p.json: $.acceptance_policy.require_evidence: number overflow: '1e400' is outside the "
                   "range of a double");
}

TEST(StrictJson, GraphWithRepeatedKeyIsRefused) {
    auto e = error_of([] {
        parse_graph(std::string(kGraphHead) +
                        R"({"id": 1, "op": "relu", "op": "exp", "parents": [0], "shape": [2]}], "outputs": [1]})",
                    "g.json");
    });
    EXPECT_EQ(e, "g.json: $.nodes[1].op: duplicate key 'op' (each key may appear once in an object)");
    e = error_of([] {
        parse_graph(std::string(kGraphHead) +
                        R"({"id": 1, "op": "scale", "parents": [0], "shape": [2], "attrs": {"factor": 1, "factor": 2}}], "outputs": [1]})",
                    "g.json");
    });
    EXPECT_EQ(e, "g.json: $.nodes[1].attrs.factor: duplicate key 'factor' (each key may appear once in an object)");
    e = error_of([] {
        parse_graph(std::string(kGraphHead) + R"({"id": 1, "op": "relu", "parents": [0], "shape": [2]}], "outputs": [1], "outputs": [0]})",
                    "g.json");
    });
    EXPECT_EQ(e, "g.json: $.outputs: duplicate key 'outputs' (each key may appear once in an object)");
}

TEST(StrictJson, SafetensorsHeaderWithRepeatedKeyIsRefused) {
    const auto p = fs::temp_directory_path() / ("capsule-json-" + std::to_string(::getpid()) + ".safetensors");
    const std::string header =
        R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})";
    std::string bytes;
    const std::uint64_t n = header.size();
    bytes.append(reinterpret_cast<const char*>(&n), 8);
    bytes += header + std::string(8, '\0');
    std::ofstream(p, std::ios::binary) << bytes;
    EXPECT_EQ(error_of([&] { read_safetensors(p); }),
              p.string() + ": $.w: duplicate key 'w' (each key may appear once in an object)");
    // A repeated key inside one tensor's entry, too.
    const std::string inner = R"({"w": {"dtype": "F32", "shape": [1], "shape": [2], "data_offsets": [0, 4]}})";
    bytes.clear();
    const std::uint64_t m = inner.size();
    bytes.append(reinterpret_cast<const char*>(&m), 8);
    bytes += inner + std::string(4, '\0');
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
    EXPECT_EQ(error_of([&] { read_safetensors(p); }),
              p.string() + ": $.w.shape: duplicate key 'shape' (each key may appear once in an object)");
    fs::remove(p);
}

// parse_json_text reads with simdjson first (the start-up cost of every command is reading the
// plugin manifests) and leaves anything it would not read exactly like the strict nlohmann reader
// to that reader. Each text below is one of the places where the two parsers differ or might.
TEST(StrictJson, FastPathGivesTheStrictReadersDocumentOrError) {
    const std::string texts[] = {
        R"({"a": [1, -2, 3.5, true, null, "s", {"b": {}}], "c": {"d": [[], [{}]]}})",
        "0", "-0", "[-0]", "[-0.0]", "-0e0", "[0, -0, 1]", R"({"date": "2026-01-02"})",
        "9223372036854775807", "9223372036854775808", "18446744073709551615",
        "18446744073709551616", "-9223372036854775808", "-9223372036854775809", "1e-400", "1e400",
        "1.7976931348623157e308", "4.9e-324", "0.1", "1E2", "[1.0, 2e0]",
        R"("\u00e9")", R"("\ud83d\ude00")", R"("\ud800")", R"("\udc00")", R"("a\u0000b")",
        R"({"a": 1, "\u0061": 2})", R"({"a": 1, "a": 2})", R"({"": 1, "": 2})", R"({"": {"": []}})",
        "\xef\xbb\xbf{}", "\"\x7f\"", "\"a\tb\"", "\"\xc0\x80\"", "\"\xff\"", " [1] ", "[1] x",
        "[1,]", "{\"a\":1,}", "", "   ", "nul", "NaN", "[Infinity]", "// c\n1", "01", "1.", ".5",
        std::string(2000, '[') + std::string(2000, ']'),
    };
    for (const auto& text : texts) {
        SCOPED_TRACE(text.substr(0, 60));
        auto fast = raised([&] { detail::parse_json_text(text, "t.json"); });
        auto strict = raised([&] { detail::parse_json_text_strict(text, "t.json"); });
        EXPECT_EQ(fast, strict);
        if (fast.first == "nothing") {
            EXPECT_TRUE(same(detail::parse_json_text(text, "t.json"), detail::parse_json_text_strict(text, "t.json")));
        }
    }
    // The fast path keeps nlohmann's integer types: non-negative ones unsigned.
    const auto doc = detail::parse_json_text("[1, -1, 2.0]", "t.json");
    EXPECT_TRUE(doc[0].is_number_unsigned());
    EXPECT_TRUE(doc[1].is_number_integer() && !doc[1].is_number_unsigned());
    EXPECT_TRUE(doc[2].is_number_float());
}

// JsonDocument (manifests, profiles, evidence records, plan locks, safetensors headers) reads the
// values the strict reader reads, types included, and refuses what it refuses with its message.
TEST(JsonDocument, ReadsWhatTheStrictReaderReadsAndRefusesTheRest) {
    const std::string accepted[] = {
        R"({"a": [1, -2, 3.5, true, null, "s", {"b": {}}], "c": {"d": [[], [{}]]}})",
        R"({"max": 9223372036854775807, "min": -9223372036854775808, "u": 18446744073709551615})",
        R"({"beyond": 99999999999999999999, "neg": -99999999999999999999, "tiny": 1e-400})",
        R"({"zero": -0, "fzero": -0.0, "e": 1E2, "f": 0.1})",
        R"({"esc": "\u00e9\ud83d\ude00\n\"\\\/", "raw": "é😀", "ctl": "\u0001"})",
        R"({"": 1, "k": {"": [""]}})", "[]", "7", "\"s\"", "null",
    };
    for (const auto& text : accepted) {
        SCOPED_TRACE(text);
        const auto strict = detail::parse_json_text_strict(text, "t.json");
        const detail::JsonDocument doc(text, "t.json");
        EXPECT_TRUE(same(doc.root(), strict));
    }
    const std::string refused[] = {
        R"({"a": 1, "a": 1})", R"({"a": {"b": [0, {"c": 1, "d": 2, "c": 3}]}})", R"({"a": [1, -1e400]})",
        "", "{", "[1, 2", "\"\xff\"", R"({"a": "\ud800"})", R"({"a": "\u00e9", "a": 2})", R"({"z": -0, "z": 1})",
    };
    for (const auto& text : refused) {
        SCOPED_TRACE(text);
        const auto expected = error_of([&] { detail::parse_json_text_strict(text, "t.json"); });
        ASSERT_FALSE(expected.empty());
        EXPECT_EQ(error_of([&] { detail::JsonDocument doc(text, "t.json"); }), expected);
    }
}

TEST(JsonDocument, CursorsNameTheirPathAndRefuseWrongTypes) {
    const detail::JsonDocument doc(R"({"capsules": [{"op": 1}, {"op": "x", "n": [true]}], "odd key": {}})", "m.json");
    const auto root = doc.root();
    std::vector<std::string> paths;
    root.at("capsules").each([&](const detail::JsonCursor& c, std::size_t i) {
        paths.push_back(c.at("op").path() + "#" + std::to_string(i));
    });
    EXPECT_EQ(paths, (std::vector<std::string>{"$.capsules[0].op#0", "$.capsules[1].op#1"}));
    EXPECT_EQ(error_of([&] { root.at("capsules").each([](const detail::JsonCursor& c, std::size_t) { c.at("op").string(); }); }),
              "m.json: $.capsules[0].op: expected a string, got number");
    EXPECT_EQ(error_of([&] { root.at("missing"); }), "m.json: $: missing required key 'missing'");
    EXPECT_EQ(error_of([&] { root.at("odd key").each([](const detail::JsonCursor&, std::size_t) {}); }),
              "m.json: $.odd key: expected an array, got object");
    EXPECT_EQ(error_of([&] { root.object({"capsules"}); }), "m.json: $: unknown key 'odd key'; valid keys: capsules");
    EXPECT_FALSE(root.find("missing"));
    ASSERT_TRUE(root.find("odd key"));
    EXPECT_TRUE(root.find("odd key")->is_object());
    // The first kMaxDepth steps of a deeper path are kept, then "...".
    std::string deep = "1";
    for (int i = 0; i < 14; ++i) deep = R"({"k": )" + deep + "}";
    const detail::JsonDocument deep_doc(deep, "d.json");
    auto c = deep_doc.root();
    for (int i = 0; i < 14; ++i) c = c.at("k");
    EXPECT_EQ(c.path(), "$.k.k.k.k.k.k.k.k.k.k.k.k...");
    EXPECT_EQ(error_of([&] { c.string(); }), "d.json: $.k.k.k.k.k.k.k.k.k.k.k.k...: expected a string, got number");
}

// The limit is exact whatever the innermost value, on either path (simdjson's, and the strict
// reader's for texts with a \u escape), and a document far deeper is refused, not a crash (the
// strict reader's document is never re-spelled then: that recursed once per level).
TEST(JsonDocument, NestingBeyondTheLimitIsAnInputError) {
    const auto limit = detail::JsonDocument::kMaxNesting;
    const std::string refusal = "t.json: JSON nested deeper than " + std::to_string(limit) + " levels";
    auto nested = [](std::size_t depth, const std::string& inner, char open = '[') {
        const char close = open == '[' ? ']' : '}';
        std::string text;
        for (std::size_t i = 0; i < depth; ++i) text += open == '[' ? std::string("[") : std::string(R"({"k":)");
        text += inner;
        return text + std::string(depth, close);
    };
    for (const std::string inner : {"", "1", "\"\\u00e9\""}) {
        SCOPED_TRACE(inner);
        for (char open : {'[', '{'}) {
            if (open == '{' && inner.empty()) continue;  // {"k":} is malformed
            EXPECT_NO_THROW(detail::JsonDocument(nested(limit, inner, open), "t.json"));
            EXPECT_EQ(error_of([&] { detail::JsonDocument doc(nested(limit + 1, inner, open), "t.json"); }), refusal);
        }
    }
    for (const std::string inner : {"1", "\"\\u00e9\"", "-0"}) {
        const std::string deep = nested(100000, inner);
        EXPECT_EQ(detail::parse_json_text_strict(deep, "t.json").size(), 1u);  // nlohmann reads it
        EXPECT_EQ(error_of([&] { detail::JsonDocument doc(deep, "t.json"); }), refusal);
    }
    // Through a real reader: a profile file as deep.
    EXPECT_EQ(error_of([&] { profile_from_json(nested(70000, "1"), "deep.json"); }),
              "deep.json: JSON nested deeper than " + std::to_string(limit) + " levels");
}

// Which unknown key or bad tensor an error names does not depend on the members' order, nor on
// whether the text took the strict reader's path (a \u escape anywhere re-spells it sorted).
TEST(JsonDocument, ErrorsNameTheSmallestOffendingKey) {
    for (const std::string extra : {"", R"(, "d": "\u00e9")"}) {
        const std::string text = R"({"zzz": 1, "a": 2, "aaa": 3)" + extra + "}";
        const detail::JsonDocument doc(text, "t.json");
        EXPECT_EQ(error_of([&] { doc.root().object({"a", "d"}); }), "t.json: $: unknown key 'aaa'; valid keys: a, d") << text;
    }
    const std::string long_key(1000, 'x');
    const detail::JsonDocument doc(R"({")" + long_key + R"(": 1})", "t.json");
    EXPECT_EQ(error_of([&] { doc.root().object({"a"}); }),
              "t.json: $: unknown key '" + long_key.substr(0, 64) + "...'; valid keys: a");
}

// A thread's first document uses the thread's parser; one read while it lives uses memory of its
// own; both stay readable, and the parser is free again after a refused text.
TEST(JsonDocument, DocumentsAliveTogetherOnOneThreadStayValid) {
    const detail::JsonDocument first(R"({"a": "first"})", "1.json");
    {
        const detail::JsonDocument second(R"({"a": "second"})", "2.json");
        EXPECT_EQ(first.root().at("a").string(), "first");
        EXPECT_EQ(second.root().at("a").string(), "second");
    }
    EXPECT_FALSE(error_of([] { detail::JsonDocument bad("{", "3.json"); }).empty());
    const detail::JsonDocument third(R"({"a": "third"})", "4.json");
    EXPECT_EQ(first.root().at("a").string(), "first");
    EXPECT_EQ(third.root().at("a").string(), "third");
    std::thread([] {
        const detail::JsonDocument other(R"([1, 2])", "5.json");
        EXPECT_EQ(other.root().array_size(), 2u);
    }).join();
}
