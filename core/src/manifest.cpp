#include "capsule/manifest.hpp"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "capsule/ir.hpp"
#include "json_reader.hpp"

namespace capsule {

using detail::JsonCursor;
using nlohmann::json;

namespace detail {
std::string read_text_file(const std::filesystem::path& path, std::string_view what) {
    std::string text;
    read_text_file_into(path, what, text);
    return text;
}

void read_text_file_into(const std::filesystem::path& path, std::string_view what, std::string& text) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
        throw Error(ErrorCode::input, path.string() + ": cannot read " + std::string(what) +
                         ": no such regular file");
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw Error(ErrorCode::input, path.string() + ": cannot open " + std::string(what));
    // One read of the whole file (a stream buffer copy costs as much as parsing a manifest).
    const auto size = static_cast<std::streamoff>(in.tellg());
    text.resize(static_cast<std::size_t>(std::max<std::streamoff>(size, 0)));
    in.seekg(0);
    if (!in.read(text.data(), static_cast<std::streamsize>(text.size())))
        throw Error(ErrorCode::input, path.string() + ": cannot read " + std::string(what));
    // A file that grew after tellg is read to its end.
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
}  // namespace detail

std::string to_string(const AbiVersion& version) {
    return std::to_string(version.major) + "." + std::to_string(version.minor);
}

void validate_registry_mode(std::string_view mode) {
    bool ok = !mode.empty();
    for (char c : mode) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-');
    if (!ok)
        throw Error(ErrorCode::input, "invalid registry mode '" + std::string(mode) +
                         "': use lowercase letters, digits and '-' (e.g. default, with-libtorch)");
}

namespace {

ContractClaim read_claim(const JsonCursor& c) {
    c.object({"kind", "op", "layout", "spec", "vjp_mode"});
    ContractClaim claim;
    claim.kind = c.at("kind").spelling<ClaimKind>();
    claim.op = c.at("op").spelling<BackendOp>();
    if (auto v = c.find("layout")) claim.layout = v->spelling<Layout>();
    if (auto v = c.find("spec")) claim.spec = v->nonempty_string();
    if (auto v = c.find("vjp_mode")) claim.vjp_mode = v->spelling<VJPMode>();
    // The fields a claim carries are fixed by its kind; extra ones would be silently meaningless.
    const bool wants_layout = claim.kind == ClaimKind::layout_compatibility;
    const bool wants_spec =
        claim.kind == ClaimKind::value_refinement || claim.kind == ClaimKind::vjp_refinement;
    const bool wants_vjp = claim.kind == ClaimKind::vjp_refinement;
    if (wants_layout != claim.layout.has_value())
        c.fail(wants_layout ? "layout-compatibility claim needs 'layout'"
                            : "'layout' belongs only to layout-compatibility claims");
    if (wants_spec != claim.spec.has_value())
        c.fail(wants_spec ? "value/vjp-refinement claim needs 'spec'"
                          : "'spec' belongs only to value-refinement and vjp-refinement claims");
    if (wants_vjp != claim.vjp_mode.has_value())
        c.fail(wants_vjp ? "vjp-refinement claim needs 'vjp_mode'"
                         : "'vjp_mode' belongs only to vjp-refinement claims");
    return claim;
}

ContractDescriptor read_descriptor(const JsonCursor& c) {
    c.object({"claim", "summary", "evidence", "provenance"});
    ContractDescriptor d;
    d.claim = read_claim(c.at("claim"));
    if (auto v = c.find("summary")) d.summary = v->string();
    d.evidence = c.at("evidence").spelling<Evidence>();
    if (auto p = c.find("provenance")) {
        p->object({"source_file", "native_symbol", "note"});
        Provenance prov;
        if (auto v = p->find("source_file")) prov.source_file = v->nonempty_string();
        if (auto v = p->find("native_symbol")) prov.native_symbol = v->nonempty_string();
        if (auto v = p->find("note")) prov.note = v->nonempty_string();
        d.provenance = prov;
    }
    return d;
}

/// A plugin or capsule name: non-empty, printable ASCII without spaces or path separators (names
/// appear in reports, file names and lockfiles).
std::string read_name(const JsonCursor& c, std::string_view what) {
    auto name = c.string();
    if (name.empty()) c.fail(std::string(what) + " must not be empty");
    for (unsigned char ch : name)
        if (ch <= ' ' || ch >= 127 || ch == '/' || ch == '\\')
            c.fail(std::string(what) + " '" + name +
                   "' may hold only printable ASCII without spaces, '/' or '\\'");
    return name;
}

KernelCapsule read_capsule(const JsonCursor& c) {
    c.object({"name", "op", "provider", "device", "spec", "trust", "supports_forward", "vjp",
              "runtime", "contracts", "notes", "dtypes"});
    KernelCapsule k;
    k.name = read_name(c.at("name"), "capsule name");
    k.op = c.at("op").spelling<BackendOp>();
    k.provider = c.at("provider").spelling<Provider>();
    k.device = c.at("device").spelling<Device>();
    k.spec = c.at("spec").nonempty_string();
    k.trust = c.at("trust").spelling<TrustLevel>();
    const auto forward = c.find("supports_forward");
    k.supports_forward = forward ? forward->boolean() : true;
    const auto vjp = c.find("vjp");
    k.vjp_mode = vjp ? vjp->spelling<VJPMode>() : VJPMode::none;
    k.runtime = c.at("runtime").spelling<RuntimeSupport>();
    auto contracts = c.at("contracts");
    contracts.object({"shape", "layout", "value", "vjp"});
    k.shape = read_descriptor(contracts.at("shape"));
    k.layout = read_descriptor(contracts.at("layout"));
    k.value = read_descriptor(contracts.at("value"));
    k.vjp = read_descriptor(contracts.at("vjp"));
    if (auto v = c.find("notes")) k.notes = v->string();
    if (auto v = c.find("dtypes")) {
        k.dtypes = 0;
        v->each([&](const JsonCursor& d, std::size_t) {
            const auto bit = std::uint64_t{1} << static_cast<unsigned>(d.spelling<DType>());
            if (k.dtypes & bit) d.fail("dtype '" + d.string() + "' is listed twice");
            k.dtypes |= bit;
        });
        if (!k.dtypes) v->fail("capsule '" + k.name + "' lists no dtypes (omit the key for float32, float64, int64, bool)");
    }
    return k;
}

/// Test and fuzz evidence is earned by running a kernel (DESIGN.md section 10): a capsule that has
/// none cannot claim it.
void refuse_unearned_evidence(const PluginManifest& m, const KernelCapsule& k, const JsonCursor& c) {
    const bool has_kernel = !m.is_stub() && (k.runtime == RuntimeSupport::eager ||
                                             k.runtime == RuntimeSupport::test_only);
    if (has_kernel) return;
    const std::string why = m.is_stub() ? "the plugin has no library"
                                        : "its runtime is " + std::string(to_string(k.runtime));
    for (auto obligation : all_values<Obligation>()) {
        const auto evidence = k.contract(obligation).evidence;
        if (evidence == Evidence::test_suite || evidence == Evidence::fuzz_oracle)
            c.at("contracts").at(to_string(obligation)).at("evidence")
                .fail("capsule '" + k.name + "' has no kernel (" + why + ") and cannot claim " +
                      std::string(to_string(evidence)) +
                      " evidence: evidence is earned by running a kernel");
    }
}

ConformanceDeclaration read_conformance(const JsonCursor& c) {
    c.object({"tolerances", "unsupported"});
    ConformanceDeclaration d;
    if (c.has("tolerances")) {
        c.at("tolerances").each([&](const JsonCursor& t, std::size_t) {
            t.object({"ops", "rtol", "atol"});
            ConformanceDeclaration::Tolerance tol;
            if (t.has("ops")) {
                auto ops = t.at("ops");
                ops.each([&](const JsonCursor& op, std::size_t) {
                    tol.ops.push_back(op.spelling<BackendOp>());
                });
                if (tol.ops.empty()) ops.fail("list at least one op, or leave ops out for every op");
            }
            tol.rtol = t.at("rtol").number();
            tol.atol = t.at("atol").number();
            if (tol.rtol < 0 || tol.atol < 0 || tol.rtol > 1 || tol.atol > 1)
                t.fail("rtol and atol must be between 0 and 1");
            d.tolerances.push_back(std::move(tol));
        });
    }
    if (c.has("unsupported")) {
        c.at("unsupported").each([&](const JsonCursor& u, std::size_t) {
            u.object({"case", "op", "dtype", "attribute", "error_cases", "reason"});
            ConformanceDeclaration::Unsupported entry;
            if (auto v = u.find("case")) entry.case_name = v->nonempty_string();
            if (auto v = u.find("op")) entry.op = v->spelling<BackendOp>();
            if (u.has("dtype")) {
                entry.dtype = u.at("dtype").string();
                if (entry.dtype != "float32" && entry.dtype != "float64")
                    u.at("dtype").fail("expected float32 or float64");
            }
            if (u.has("attribute")) {
                entry.attribute = u.at("attribute").nonempty_string();
                if (entry.attribute.find('=') == std::string::npos)
                    u.at("attribute").fail("expected NAME=VALUE");
            }
            if (auto v = u.find("error_cases")) entry.error_cases = v->boolean();
            entry.reason = u.at("reason").nonempty_string();
            if (entry.case_name.empty() && !entry.op && entry.dtype.empty() &&
                entry.attribute.empty() && !entry.error_cases)
                u.fail("an unsupported entry must match something (case, op, dtype, attribute or "
                       "error_cases)");
            d.unsupported.push_back(std::move(entry));
        });
    }
    return d;
}

AbiVersion read_abi(const JsonCursor& c) {
    c.object({"major", "minor"});
    auto major = c.at("major").integer();
    auto minor = c.at("minor").integer();
    if (major < 0 || minor < 0 || major > 0xFFFF || minor > 0xFFFF)
        c.fail("ABI version numbers must be between 0 and 65535");
    return AbiVersion{static_cast<std::uint32_t>(major), static_cast<std::uint32_t>(minor)};
}

}  // namespace

PluginManifest parse_manifest(std::string_view json_text, const std::filesystem::path& source) {
    const std::string src = source.empty() ? "manifest" : source.string();
    const detail::JsonDocument doc(json_text, src);
    const JsonCursor root = doc.root();
    root.object({"name", "version", "abi_version", "library", "device", "providers",
                 "registry_modes", "priority", "capsules", "description", "conformance"});
    PluginManifest m;
    m.source = source;
    m.name = read_name(root.at("name"), "plugin name");
    m.version = root.at("version").nonempty_string();
    if (root.has("description")) root.at("description").string();
    m.abi = read_abi(root.at("abi_version"));
    auto library = root.at("library");
    if (!library.is_null()) {
        m.library = library.string();
        if (m.library->empty() || *m.library == "." || *m.library == ".." ||
            m.library->find_first_of("/\\") != std::string::npos ||
            m.library->find('\0') != std::string::npos)
            library.fail("library must be a file name beside the manifest (no directories)");
    }
    m.device = root.at("device").spelling<Device>();
    root.at("providers").each([&](const JsonCursor& item, std::size_t) {
        const auto p = item.spelling<Provider>();
        if (std::find(m.providers.begin(), m.providers.end(), p) != m.providers.end())
            item.fail("provider " + std::string(to_string(p)) + " is listed twice");
        m.providers.push_back(p);
    });
    auto modes = root.at("registry_modes");
    modes.each([&](const JsonCursor& item, std::size_t) {
        auto mode = item.string();
        try {
            validate_registry_mode(mode);
        } catch (const Error& e) {
            item.fail(e.what());
        }
        if (std::find(m.registry_modes.begin(), m.registry_modes.end(), mode) != m.registry_modes.end())
            item.fail("registry mode '" + mode + "' is listed twice");
        m.registry_modes.push_back(mode);
    });
    if (m.registry_modes.empty()) modes.fail("a plugin must join at least one registry mode");
    const auto priority = root.find("priority");
    m.priority = priority ? priority->integer() : 0;

    auto capsules = root.at("capsules");
    m.capsules.reserve(capsules.array_size());
    std::set<std::string> names;
    capsules.each([&](const JsonCursor& c, std::size_t) {
        KernelCapsule k = read_capsule(c);
        if (k.device != m.device)
            c.at("device").fail("capsule device " + std::string(to_string(k.device)) +
                                " differs from the plugin's device " +
                                std::string(to_string(m.device)));
        if (std::find(m.providers.begin(), m.providers.end(), k.provider) == m.providers.end())
            c.at("provider").fail("provider " + std::string(to_string(k.provider)) +
                                  " is not in the plugin's providers");
        if (!names.insert(k.name).second)
            c.at("name").fail("duplicate capsule name '" + k.name + "'");
        if (m.is_stub() && (k.runtime == RuntimeSupport::eager ||
                            k.runtime == RuntimeSupport::test_only))
            c.at("runtime").fail("capsule '" + k.name + "' is " +
                                 std::string(to_string(k.runtime)) +
                                 " but the plugin has no library to implement it");
        refuse_unearned_evidence(m, k, c);
        m.capsules.push_back(std::move(k));
    });
    if (root.has("conformance")) m.conformance = read_conformance(root.at("conformance"));
    return m;
}

PluginManifest load_manifest(const std::filesystem::path& path) {
    // Each discovery thread reads every manifest into the same buffer: fresh memory costs a page
    // fault per 4 KiB (parse_manifest reads no other file, so the buffer is free again after it).
    thread_local std::string text;
    detail::read_text_file_into(path, "manifest", text);
    return parse_manifest(text, path);
}

namespace {
json claim_to_json(const ContractClaim& c) {
    json j{{"kind", to_string(c.kind)}, {"op", to_string(c.op)}};
    if (c.layout) j["layout"] = to_string(*c.layout);
    if (c.spec) j["spec"] = *c.spec;
    if (c.vjp_mode) j["vjp_mode"] = to_string(*c.vjp_mode);
    return j;
}
json descriptor_to_json(const ContractDescriptor& d) {
    json j{{"claim", claim_to_json(d.claim)}, {"summary", d.summary},
           {"evidence", to_string(d.evidence)}};
    if (d.provenance) {
        json p = json::object();
        if (!d.provenance->source_file.empty()) p["source_file"] = d.provenance->source_file;
        if (!d.provenance->native_symbol.empty()) p["native_symbol"] = d.provenance->native_symbol;
        if (!d.provenance->note.empty()) p["note"] = d.provenance->note;
        j["provenance"] = p;
    }
    return j;
}
}  // namespace

json capsule_to_json(const KernelCapsule& k) {
    json j{{"name", k.name},
                {"op", to_string(k.op)},
                {"provider", to_string(k.provider)},
                {"device", to_string(k.device)},
                {"spec", k.spec},
                {"trust", to_string(k.trust)},
                {"supports_forward", k.supports_forward},
                {"vjp", to_string(k.vjp_mode)},
                {"runtime", to_string(k.runtime)},
                {"contracts",
                 {{"shape", descriptor_to_json(k.shape)},
                  {"layout", descriptor_to_json(k.layout)},
                  {"value", descriptor_to_json(k.value)},
                  {"vjp", descriptor_to_json(k.vjp)}}},
                {"notes", k.notes}};
    if (k.dtypes != kDTypes1_0) {
        json dtypes = json::array();
        for (const auto& [dtype, name] : Spellings<DType>::values)
            if (k.dtypes & (std::uint64_t{1} << static_cast<unsigned>(dtype))) dtypes.push_back(name);
        j["dtypes"] = std::move(dtypes);
    }
    return j;
}

json conformance_to_json(const ConformanceDeclaration& d) {
    json tolerances = json::array();
    for (const auto& t : d.tolerances) {
        json entry{{"rtol", t.rtol}, {"atol", t.atol}};
        if (!t.ops.empty()) {
            entry["ops"] = json::array();
            for (auto op : t.ops) entry["ops"].push_back(to_string(op));
        }
        tolerances.push_back(std::move(entry));
    }
    json unsupported = json::array();
    for (const auto& u : d.unsupported) {
        json entry = json::object();
        if (!u.case_name.empty()) entry["case"] = u.case_name;
        if (u.op) entry["op"] = to_string(*u.op);
        if (!u.dtype.empty()) entry["dtype"] = u.dtype;
        if (!u.attribute.empty()) entry["attribute"] = u.attribute;
        if (u.error_cases) entry["error_cases"] = true;
        entry["reason"] = u.reason;
        unsupported.push_back(std::move(entry));
    }
    return json{{"tolerances", tolerances}, {"unsupported", unsupported}};
}

json manifest_to_json(const PluginManifest& m) {
    json providers = json::array();
    for (auto p : m.providers) providers.push_back(to_string(p));
    json capsules = json::array();
    for (const auto& k : m.capsules) capsules.push_back(capsule_to_json(k));
    json out{{"name", m.name},
                {"version", m.version},
                {"abi_version", {{"major", m.abi.major}, {"minor", m.abi.minor}}},
                {"library", m.library ? json(*m.library) : json(nullptr)},
                {"device", to_string(m.device)},
                {"providers", providers},
                {"registry_modes", m.registry_modes},
                {"priority", m.priority},
                {"capsules", capsules}};
    if (!m.conformance.tolerances.empty() || !m.conformance.unsupported.empty())
        out["conformance"] = conformance_to_json(m.conformance);
    return out;
}

}  // namespace capsule
