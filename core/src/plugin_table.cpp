#include "capsule/plugin_table.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>

#include "capsule/ir.hpp"

namespace capsule {

using std::string;

static_assert(kDTypes1_0 == CAPSULE_DTYPES_1_0);
static_assert(static_cast<int>(DType::int32) == CAPSULE_DTYPE_INT32 &&
              static_cast<int>(DType::uint64) == CAPSULE_DTYPE_UINT64 &&
              static_cast<int>(DType::float16) == CAPSULE_DTYPE_FLOAT16 &&
              static_cast<int>(DType::bfloat16) == CAPSULE_DTYPE_BFLOAT16,
              "capsule::DType and capsule_dtype must agree");

namespace {

/// Smallest plugin table this host can use: everything up to and including `extensions`
/// exists since ABI 1.0.
constexpr std::size_t kMinPluginTableSize = CAPSULE_PLUGIN_TABLE_SIZE_1_0;

/// The distance between kernel entries the table states (ABI 1.1), or 1.0's entry size for a 1.0
/// table; 0 with `why` set when the stated size is unusable.
std::size_t kernel_stride(const capsule_plugin* t, string& why) {
    if (!CAPSULE_HAS_FIELD(t, capsule_plugin, kernel_entry_size)) return CAPSULE_KERNEL_ENTRY_SIZE_1_0;
    if (t->kernel_entry_size < CAPSULE_KERNEL_ENTRY_SIZE_1_0) {
        why = "plugin table states kernel_entry_size " + std::to_string(t->kernel_entry_size) +
              ", less than ABI 1.0's " + std::to_string(CAPSULE_KERNEL_ENTRY_SIZE_1_0) +
              " bytes (set it to sizeof(capsule_kernel))";
        return 0;
    }
    return t->kernel_entry_size;
}

/// Copies kernel entry `i` with the fields both sides know; the rest stays zero.
capsule_kernel read_kernel(const capsule_plugin* t, std::size_t stride, std::size_t i) {
    const auto* entry = reinterpret_cast<const unsigned char*>(t->kernels) + i * stride;
    capsule_kernel k{};
    std::memcpy(&k, entry, std::min(stride, sizeof k));
    const std::size_t known = std::min({k.struct_size, stride, sizeof k});
    if (known < sizeof k) std::memset(reinterpret_cast<unsigned char*>(&k) + known, 0, sizeof k - known);
    return k;
}

/// "{float32, int32}" for a dtype mask (bits past the known dtypes as "dtype N").
string dtype_list(std::uint64_t mask) {
    string out;
    for (unsigned d = 0; d < 64; ++d) {
        if (!(mask >> d & 1)) continue;
        if (!out.empty()) out += ", ";
        out += d < Spellings<DType>::values.size() ? string(Spellings<DType>::values[d].second)
                                                   : "dtype " + std::to_string(d);
    }
    return "{" + out + "}";
}

/// Whether every page of [begin, begin + size) is mapped in this process: mincore fails with
/// ENOMEM for a range with an unmapped page, without touching the memory.
bool mapped(const void* begin, std::size_t size) {
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto first = reinterpret_cast<std::uintptr_t>(begin) & ~(page - 1);
    const auto end = reinterpret_cast<std::uintptr_t>(begin) + size;
    if (end < first) return false;  // wraps around the address space
    std::vector<unsigned char> residency((end - first + page - 1) / page);
    return ::mincore(reinterpret_cast<void*>(first), end - first, residency.data()) == 0;
}

}  // namespace

std::vector<capsule_kernel> read_kernel_entries(const capsule_plugin* t, std::size_t max_kernels, string& why) {
    why.clear();
    if (t->struct_size < kMinPluginTableSize) {
        why = "plugin table is " + std::to_string(t->struct_size) + " bytes, ABI 1.0 needs at least " +
              std::to_string(kMinPluginTableSize);
        return {};
    }
    if (t->num_kernels == 0) return {};
    if (!t->kernels) {
        why = "plugin table lists kernels but gives no array";
        return {};
    }
    const std::size_t stride = kernel_stride(t, why);
    if (!stride) return {};
    if (stride > kMaxKernelEntrySize) {
        why = "plugin table states kernel_entry_size " + std::to_string(stride) + ", more than the " +
              std::to_string(kMaxKernelEntrySize) + " bytes any ABI 1.x entry needs (set it to sizeof(capsule_kernel))";
        return {};
    }
    if (t->num_kernels > max_kernels) {
        why = "plugin table lists " + std::to_string(t->num_kernels) + " kernels, more than the " +
              std::to_string(max_kernels) + " it can implement (one per declared capsule)";
        return {};
    }
    // The whole array must be mapped memory, or reading it would fault.
    if (!mapped(t->kernels, (t->num_kernels - 1) * stride + CAPSULE_KERNEL_ENTRY_SIZE_1_0)) {
        why = "plugin table's kernel array (" + std::to_string(t->num_kernels) + " entries, " + std::to_string(stride) +
              " bytes apart) is not mapped memory";
        return {};
    }
    std::vector<capsule_kernel> out;
    for (std::size_t i = 0; i < t->num_kernels; ++i) {
        const capsule_kernel k = read_kernel(t, stride, i);
        if (k.struct_size < CAPSULE_KERNEL_ENTRY_SIZE_1_0 || k.struct_size > stride || !k.capsule_name) {
            why = "kernel entry " + std::to_string(i) + " is malformed: struct_size " + std::to_string(k.struct_size) +
                  " with entries " + std::to_string(stride) + " bytes apart" +
                  (k.capsule_name ? "" : ", or no capsule name");
            return {};
        }
        out.push_back(k);
    }
    return out;
}

std::string check_plugin_table(const capsule_plugin* t, const PluginManifest& m,
                               std::vector<capsule_kernel>& kernels) {
    if (t->struct_size < kMinPluginTableSize)
        return "plugin table is " + std::to_string(t->struct_size) + " bytes, ABI 1.0 needs at least " +
               std::to_string(kMinPluginTableSize);
    const AbiVersion lib{t->abi_major, t->abi_minor};
    if (lib.major != kHostAbiVersion.major)
        return "ABI version mismatch: library implements " + to_string(lib) + ", host implements " +
               to_string(kHostAbiVersion) + " (major versions must match)";
    if (lib.major != m.abi.major || lib.minor != m.abi.minor)
        return "library ABI " + to_string(lib) + " differs from the manifest's " + to_string(m.abi);
    if (!t->name || m.name != t->name)
        return "library names itself '" + string(t->name ? t->name : "(null)") +
               "', manifest says '" + m.name + "'";
    if (!t->version || m.version != t->version)
        return "library version '" + string(t->version ? t->version : "(null)") +
               "' differs from the manifest's '" + m.version + "'";
    if (t->device != static_cast<int32_t>(m.device))
        return "library device " +
               (t->device >= 0 && t->device < static_cast<int32_t>(Spellings<Device>::values.size())
                    ? string(to_string(static_cast<Device>(t->device)))
                    : std::to_string(t->device)) +
               " differs from the manifest's " + string(to_string(m.device));
    if (m.device != Device::cpu &&
        (!t->device_interface || t->device_interface->struct_size < sizeof(capsule_device_interface) ||
         !t->device_interface->allocate || !t->device_interface->release ||
         !t->device_interface->copy_to_device || !t->device_interface->copy_to_host))
        return "a " + string(to_string(m.device)) +
               " plugin must supply a complete device interface (allocate, release, copies)";
    string why;
    // Each kernel must be a declared capsule, once; the bound only keeps a lying count from being
    // read (an extra entry is named below as undeclared).
    const auto entries = read_kernel_entries(t, m.capsules.size() + kBackendOpCount, why);
    if (!why.empty()) return why;

    std::map<string, const KernelCapsule*> declared;
    for (const auto& k : m.capsules) declared[k.name] = &k;
    std::map<string, int> implemented;
    kernels.clear();
    for (const capsule_kernel& k : entries) {
        if (!declared.count(k.capsule_name))
            return "library implements capsule '" + string(k.capsule_name) +
                   "' that the manifest does not declare";
        if (!k.forward) return "capsule '" + string(k.capsule_name) + "' has no forward kernel";
        if (k.prepare && !k.release)
            return "capsule '" + string(k.capsule_name) + "' has prepare but no release";
        if (++implemented[k.capsule_name] > 1)
            return "library lists capsule '" + string(k.capsule_name) + "' twice";
        // The planner trusts the manifest's dtypes: they must be the kernel's own.
        const std::uint64_t dtypes = k.dtypes ? k.dtypes : CAPSULE_DTYPES_1_0;
        if (dtypes != declared[k.capsule_name]->dtypes)
            return "capsule '" + string(k.capsule_name) + "' accepts dtypes " + dtype_list(dtypes) +
                   " in the library but " + dtype_list(declared[k.capsule_name]->dtypes) + " in the manifest";
        kernels.push_back(k);
    }
    for (const auto& k : m.capsules) {
        const bool runnable = k.runtime == RuntimeSupport::eager || k.runtime == RuntimeSupport::test_only;
        if (runnable && !implemented.count(k.name))
            return "manifest marks capsule '" + k.name + "' " + string(to_string(k.runtime)) +
                   " but the library has no kernel for it";
        if (!runnable && implemented.count(k.name))
            return "library implements capsule '" + k.name + "' that the manifest marks " +
                   string(to_string(k.runtime)) + "; mark it eager or test-only";
    }
    return "";
}


}  // namespace capsule
