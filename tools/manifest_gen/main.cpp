// capsule_manifest_gen: writes a plugin's manifest from its own kernel table, the op catalog and a
// short per-plugin declaration (DESIGN.md section 10: manifests are generated, never copied by
// hand; docs/plugins.md, "Generated manifests").
//
//   capsule_manifest_gen DECLARATION.json LIBRARY OUTPUT.capsule.json
//   capsule_manifest_gen --check DECLARATION.json LIBRARY MANIFEST.capsule.json
//
// Every kernel of the library's table (`<plugin>.<op>`) becomes an `eager` capsule whose spec is
// the catalog's; its VJP mode is the declared one when the kernel has a backward, `none`
// otherwise. Ops the declaration lists as planner-only become `planner-only` capsules, which claim
// no test or fuzz evidence. The generator refuses a declaration that would make a capsule without
// a kernel claim test-suite or fuzz-oracle evidence, a planner-only op the library implements, and
// a kernel named outside the plugin or after no BackendOp. The output is parsed back with the
// host's manifest reader before it is written.
#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <map>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "capsule/json_document.hpp"
#include "capsule/manifest.hpp"
#include "capsule/op_catalog.hpp"
#include "capsule/plugin_table.hpp"

namespace capsule {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

[[noreturn]] void fail(const std::string& what) { throw Error(ErrorCode::input, what); }

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(path + ": cannot be read");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

/// Writes `text` to `path` through a temporary file beside it and a rename, so a failed write
/// never leaves a truncated or stale-looking file. Raises Error(input) naming the path and reason.
void write_file_atomically(const std::string& path, const std::string& text) {
    const std::string temp = path + ".tmp" + std::to_string(::getpid());
    {
        std::ofstream out(temp, std::ios::binary | std::ios::trunc);
        out << text;
        out.flush();
        if (!out) {
            std::remove(temp.c_str());
            fail("cannot write " + path + " (through " + temp + "): " + std::strerror(errno));
        }
    }
    if (std::rename(temp.c_str(), path.c_str()) != 0) {
        const std::string why = std::strerror(errno);
        std::remove(temp.c_str());
        fail("cannot write " + path + ": " + why);
    }
}

struct TableKernel {
    std::string name;
    bool backward = false;
    std::uint64_t dtypes = kDTypes1_0;  // the entry's mask (0 there means ABI 1.0's four)
};

/// The library's table (the library stays loaded: nothing else runs in this process).
const capsule_plugin* plugin_table(const std::string& library) {
    void* handle = dlopen(library.c_str(), RTLD_LOCAL | RTLD_NOW);
    if (!handle) fail(library + ": " + dlerror());
    auto entry = reinterpret_cast<capsule_plugin_entry_fn>(dlsym(handle, CAPSULE_PLUGIN_ENTRY_SYMBOL));
    if (!entry) fail(library + ": no symbol " CAPSULE_PLUGIN_ENTRY_SYMBOL);
    const capsule_plugin* table = entry(CAPSULE_ABI_MAJOR, CAPSULE_ABI_MINOR);
    if (!table) fail(library + ": the plugin returned no table (it refuses this host's ABI)");
    return table;
}

/// The table's kernel entries, read and bounded as the host reads them (one per op at most).
std::vector<TableKernel> kernel_table(const capsule_plugin* table, const std::string& library) {
    std::string why;
    const auto entries = read_kernel_entries(table, kBackendOpCount, why);
    if (!why.empty()) fail(library + ": " + why);
    std::vector<TableKernel> out;
    for (const auto& k : entries)
        out.push_back({k.capsule_name, k.backward != nullptr, k.dtypes ? k.dtypes : kDTypes1_0});
    return out;
}

std::string replace_spec(std::string text, std::string_view spec) {
    for (std::size_t at = 0; (at = text.find("{spec}", at)) != std::string::npos; at += spec.size())
        text.replace(at, 6, spec);
    return text;
}

/// The generator's settings for one plugin's capsules (the declaration's `capsules` object).
struct CapsuleDefaults {
    Provider provider;
    TrustLevel trust;
    VJPMode vjp;
    Provenance provenance;
    std::map<std::string, Evidence> evidence;      // shape, layout, value, vjp, no_backward
    std::map<std::string, std::string> summaries;  // the same keys, plus planner_only
    std::string notes;
    std::string planner_only_notes;
    std::set<BackendOp> planner_only;
    json overrides;  // op → {spec, value_summary, notes}
};

const std::set<std::string> kSettingKeys{"shape", "layout", "value", "vjp", "no_backward"};

CapsuleDefaults read_defaults(const json& c, const std::string& src) {
    auto need = [&](const char* key) -> const json& {
        if (!c.contains(key)) fail(src + ": $.capsules: missing required key '" + std::string(key) + "'");
        return c.at(key);
    };
    for (const auto& [key, _] : c.items())
        if (!std::set<std::string>{"provider", "trust", "vjp", "provenance", "evidence", "summaries", "notes",
                                   "planner_only", "planner_only_notes", "overrides"}
                 .count(key))
            fail(src + ": $.capsules: unknown key '" + key + "'");
    CapsuleDefaults d;
    d.provider = parse<Provider>(need("provider").get<std::string>());
    d.trust = parse<TrustLevel>(need("trust").get<std::string>());
    d.vjp = parse<VJPMode>(need("vjp").get<std::string>());
    const auto& prov = need("provenance");
    d.provenance.source_file = prov.value("source_file", "");
    d.provenance.native_symbol = prov.value("native_symbol", "");
    for (const auto& [key, value] : need("evidence").items()) {
        if (!kSettingKeys.count(key)) fail(src + ": $.capsules.evidence: unknown key '" + key + "'");
        d.evidence[key] = parse<Evidence>(value.get<std::string>());
    }
    for (const auto& [key, value] : need("summaries").items()) {
        if (!kSettingKeys.count(key) && key != "planner_only")
            fail(src + ": $.capsules.summaries: unknown key '" + key + "'");
        d.summaries[key] = value.get<std::string>();
    }
    for (const auto& key : kSettingKeys) {
        if (!d.evidence.count(key)) fail(src + ": $.capsules.evidence: missing required key '" + key + "'");
        if (!d.summaries.count(key)) fail(src + ": $.capsules.summaries: missing required key '" + key + "'");
    }
    d.notes = need("notes").get<std::string>();
    if (c.contains("planner_only")) {
        const auto& p = c.at("planner_only");
        if (p.is_string() && p == "every other op") {
            for (const auto& info : op_catalog()) d.planner_only.insert(info.op);
        } else if (p.is_array()) {
            for (const auto& op : p) d.planner_only.insert(parse<BackendOp>(op.get<std::string>()));
        } else {
            fail(src + ": $.capsules.planner_only: expected a list of ops or \"every other op\"");
        }
        d.planner_only_notes = c.value("planner_only_notes", "");
        if (!d.summaries.count("planner_only"))
            fail(src + ": $.capsules.summaries: missing required key 'planner_only'");
    }
    d.overrides = c.value("overrides", json::object());
    for (const auto& [op, o] : d.overrides.items()) {
        parse<BackendOp>(op);
        for (const auto& [key, _] : o.items())
            if (key != "spec" && key != "value_summary" && key != "notes" && key != "name")
                fail(src + ": $.capsules.overrides." + op + ": unknown key '" + key + "'");
    }
    return d;
}

ContractDescriptor descriptor(ClaimKind kind, const KernelCapsule& k, Evidence evidence, std::string summary,
                              const Provenance& provenance) {
    ContractDescriptor d;
    d.claim.kind = kind;
    d.claim.op = k.op;
    if (kind == ClaimKind::layout_compatibility) d.claim.layout = Layout::canonical_tensor;
    if (kind == ClaimKind::value_refinement || kind == ClaimKind::vjp_refinement) d.claim.spec = k.spec;
    if (kind == ClaimKind::vjp_refinement) d.claim.vjp_mode = k.vjp_mode;
    d.summary = std::move(summary);
    d.evidence = evidence;
    d.provenance = provenance;
    return d;
}

/// Test and fuzz evidence is earned by running a kernel.
void refuse_unearned(const KernelCapsule& k, Evidence e, const std::string& what) {
    if (e == Evidence::test_suite || e == Evidence::fuzz_oracle)
        fail("capsule " + k.name + " has no kernel in the library, so its " + what + " evidence cannot be " +
             std::string(to_string(e)) + ": evidence is earned by running a kernel");
}

KernelCapsule make_capsule(const std::string& plugin, Device device, const OpInfo& info, const TableKernel* kernel,
                           const CapsuleDefaults& d) {
    KernelCapsule k;
    k.name = plugin + "." + std::string(info.spelling());
    k.op = info.op;
    k.provider = d.provider;
    k.device = device;
    const json override = d.overrides.value(std::string(info.spelling()), json::object());
    k.spec = override.value("spec", std::string(info.spec));
    k.trust = d.trust;
    k.runtime = kernel ? RuntimeSupport::eager : RuntimeSupport::planner_only;
    if (kernel) k.dtypes = kernel->dtypes;
    const bool backward = kernel ? kernel->backward : info.differentiable();
    k.vjp_mode = info.differentiable() && backward ? d.vjp : VJPMode::none;
    auto summary = [&](const std::string& key) { return replace_spec(d.summaries.at(key), k.spec); };
    if (!kernel) {
        const std::string none = summary("planner_only");
        k.shape = descriptor(ClaimKind::shape_safety, k, d.evidence.at("shape"), summary("shape"), d.provenance);
        k.layout = descriptor(ClaimKind::layout_compatibility, k, d.evidence.at("layout"), summary("layout"), d.provenance);
        k.value = descriptor(ClaimKind::value_refinement, k, Evidence::not_provided, none, d.provenance);
        k.vjp = descriptor(ClaimKind::vjp_refinement, k, Evidence::not_provided, none, d.provenance);
        refuse_unearned(k, k.shape.evidence, "shape");
        refuse_unearned(k, k.layout.evidence, "layout");
        k.notes = override.value("notes", d.planner_only_notes);
        // A capsule no library implements yet may carry the name its kernel will have.
        k.name = override.value("name", k.name);
        if (k.name.rfind(plugin + ".", 0) != 0)
            fail("capsule name " + k.name + " (override of " + std::string(info.spelling()) + ") is not " + plugin +
                 ".<name>: a capsule belongs to its plugin");
        return k;
    }
    k.shape = descriptor(ClaimKind::shape_safety, k, d.evidence.at("shape"), summary("shape"), d.provenance);
    k.layout = descriptor(ClaimKind::layout_compatibility, k, d.evidence.at("layout"), summary("layout"), d.provenance);
    k.value = descriptor(ClaimKind::value_refinement, k, d.evidence.at("value"),
                         override.contains("value_summary") ? override.at("value_summary").get<std::string>()
                                                            : summary("value"),
                         d.provenance);
    if (!info.differentiable())
        k.vjp = descriptor(ClaimKind::vjp_refinement, k, d.evidence.at("vjp"),
                           "forward-only: " + std::string(info.no_vjp), d.provenance);
    else if (kernel->backward)
        k.vjp = descriptor(ClaimKind::vjp_refinement, k, d.evidence.at("vjp"), summary("vjp"), d.provenance);
    else
        k.vjp = descriptor(ClaimKind::vjp_refinement, k, d.evidence.at("no_backward"), summary("no_backward"),
                           d.provenance);
    k.notes = override.value("notes", d.notes);
    k.name = kernel->name;  // plugin.<op>, or the name an override declares (generate checks which)
    return k;
}

/// The declaration at `path`; one with a "base" (a path relative to it) is that declaration with
/// this one merged over it as a JSON merge patch (RFC 7386), so that two plugins built from one
/// source can share their conformance notes. One level only: a base has no base.
json read_declaration(const std::string& path) {
    json decl = parse_json_document(read_file(path), path);
    if (!decl.is_object() || !decl.contains("base")) return decl;
    if (!decl.at("base").is_string()) fail(path + ": $.base: expected the path of a declaration");
    const auto base_path = (std::filesystem::path(path).parent_path() / decl.at("base").get<std::string>()).string();
    json base = parse_json_document(read_file(base_path), base_path);
    if (!base.is_object() || base.contains("base")) fail(base_path + ": a base declaration is an object without a base");
    decl.erase("base");
    base.merge_patch(decl);
    return base;
}

ordered_json generate(const std::string& declaration_path, const std::string& library) {
    const json decl = read_declaration(declaration_path);
    if (!decl.is_object() || !decl.contains("manifest") || !decl.contains("capsules") ||
        !decl.at("manifest").is_object() || !decl.at("capsules").is_object())
        fail(declaration_path + ": $: expected an object with objects \"manifest\" and \"capsules\"");
    for (const auto& [key, _] : decl.items())
        if (key != "manifest" && key != "capsules") fail(declaration_path + ": $: unknown key '" + key + "'");
    // The plugin-level fields are a manifest without capsules: parse them as one.
    json head = decl.at("manifest");
    head["capsules"] = json::array();
    const PluginManifest base = parse_manifest(head.dump(), declaration_path);
    const CapsuleDefaults d = read_defaults(decl.at("capsules"), declaration_path);

    // Capsule names the declaration gives instead of plugin.<op> (e.g. native_cuda.flash_attention
    // for scaled_dot_product_attention): a kernel of that name implements that op.
    std::map<std::string, BackendOp> declared_names;
    for (const auto& [op, o] : d.overrides.items())
        if (o.is_object() && o.contains("name") && o.at("name").is_string())
            declared_names.emplace(o.at("name").get<std::string>(), parse<BackendOp>(op));
    std::vector<KernelCapsule> capsules;
    std::set<BackendOp> implemented;
    std::set<std::string> kernel_names;
    const capsule_plugin* table = plugin_table(library);
    for (const auto& kernel : kernel_table(table, library)) {
        const std::string prefix = base.name + ".";
        if (kernel.name.rfind(prefix, 0) != 0)
            fail(library + ": kernel " + kernel.name + " is not named " + prefix + "<op> or a name the declaration gives");
        const auto declared = declared_names.find(kernel.name);
        const BackendOp op = declared != declared_names.end() ? declared->second
                                                              : parse<BackendOp>(kernel.name.substr(prefix.size()));
        kernel_names.insert(kernel.name);
        if (!implemented.insert(op).second) fail(library + ": two kernels for " + kernel.name);
        capsules.push_back(make_capsule(base.name, base.device, op_info(op), &kernel, d));
    }
    for (const auto& info : op_catalog()) {
        if (!d.planner_only.count(info.op) || implemented.count(info.op)) continue;
        capsules.push_back(make_capsule(base.name, base.device, info, nullptr, d));
    }
    for (const auto& [op, o] : d.overrides.items()) {
        const BackendOp which = parse<BackendOp>(op);
        if (!implemented.count(which) && !d.planner_only.count(which))
            fail(declaration_path + ": $.capsules.overrides." + op + ": the library has no kernel for it");
        if (implemented.count(which) && o.contains("name") && !kernel_names.count(o.at("name").get<std::string>()))
            fail(declaration_path + ": $.capsules.overrides." + op + ".name: the library implements " + op +
                 " under another name (a kernel's capsule is named by the library)");
    }
    if (decl.at("capsules").contains("planner_only") && decl.at("capsules").at("planner_only").is_array())
        for (const auto& op : decl.at("capsules").at("planner_only"))
            if (implemented.count(parse<BackendOp>(op.get<std::string>())))
                fail(declaration_path + ": $.capsules.planner_only: " + op.get<std::string>() +
                     " is implemented by the library (a capsule's runtime must tell the truth)");

    PluginManifest out = base;
    out.capsules = std::move(capsules);
    ordered_json doc = ordered_json::parse(manifest_to_json(out).dump());
    // Key order as a person writes it: plugin fields first, capsules last.
    ordered_json ordered;
    for (const char* key : {"name", "version", "abi_version", "library", "device", "providers", "registry_modes",
                            "priority", "description"})
        if (decl.at("manifest").contains(key)) ordered[key] = decl.at("manifest").at(key);
    if (decl.at("manifest").contains("conformance")) ordered["conformance"] = decl.at("manifest").at("conformance");
    ordered["capsules"] = doc.at("capsules");
    // The host must accept what it reads: the manifest parses, and the library's table matches it
    // (ABI, name, version, device, every kernel) as when the host opens the library.
    const PluginManifest generated = parse_manifest(ordered.dump(), "generated manifest");
    std::vector<capsule_kernel> kernels;
    if (auto why = check_plugin_table(table, generated, kernels); !why.empty())
        fail(library + " does not match " + declaration_path + ": " + why);
    return ordered;
}

}  // namespace
}  // namespace capsule

int main(int argc, char** argv) {
    const bool check = argc == 5 && std::string(argv[1]) == "--check";
    if (argc != 4 && !check) {
        std::cerr << "usage: capsule_manifest_gen [--check] DECLARATION.json LIBRARY MANIFEST.capsule.json\n";
        return 2;
    }
    const std::string declaration = argv[argc - 3], library = argv[argc - 2], output = argv[argc - 1];
    try {
        const std::string text = capsule::generate(declaration, library).dump(1) + "\n";
        if (check) {
            if (capsule::read_file(output) == text) return 0;
            std::cerr << output << " is not what " << declaration << " and " << library
                      << " give; regenerate it: capsule_manifest_gen " << declaration << " " << library << " "
                      << output << "\n";
            return 1;
        }
        capsule::write_file_atomically(output, text);
        return 0;
    } catch (const nlohmann::json::exception& e) {
        // A value of the wrong type in the declaration (the manifest part is checked by the host).
        std::cerr << "capsule_manifest_gen: " << declaration << ": " << e.what() << "\n";
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "capsule_manifest_gen: " << e.what() << "\n";
        return 2;
    }
}
