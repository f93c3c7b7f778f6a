// Evidence records (DESIGN.md section 10, "Evidence is earned"): what `capsule verify` found when
// it ran the shared capsule conformance suite against one plugin library on one machine, bound
// to the library's SHA-256. The `verified` acceptance policy counts a capsule's test-suite
// evidence only when such a record exists for the exact library that would run it and the
// capsule passed there.
//
// A record is one JSON file, `<plugin>-<library sha256>.evidence.json`, in an evidence directory:
// `--evidence-dir` when given, else `evidence/` beside the plugin's manifest, else (for writing,
// when that is not writable) the user's cache directory (`$XDG_CACHE_HOME/capsule/evidence`,
// default `~/.cache/capsule/evidence`). Records are read under the plugins' trust-on-disk rule:
// a record in a directory another user can write is refused, since it could be forged.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "capsule/vocabulary.hpp"

namespace capsule {

/// One capsule's results in an evidence record.
struct CapsuleEvidence {
    std::string capsule;  // e.g. `onednn.relu`
    BackendOp op = BackendOp::add;
    /// Forward cases run and passed (an error case passes when the kernel refuses its inputs).
    int forward_cases = 0;
    int forward_passed = 0;
    /// Backward cases (finite differences) run and passed; 0 when the kernel has no backward.
    int gradient_cases = 0;
    int gradient_passed = 0;
    /// Cases of this op the plugin declares unsupported (manifest `conformance`): case, reason.
    std::vector<std::pair<std::string, std::string>> unsupported;
    /// The first failures, `<case>: <what differed>`.
    std::vector<std::string> failures;
    /// Over every compared output element: the largest |got - want|, and the largest
    /// |got - want| / (atol + rtol |want|) (at most 1 when every element is within tolerance).
    double max_abs_error = 0;
    double max_error_ratio = 0;
    /// The largest tolerances a case of this capsule was compared with.
    double rtol = 0;
    double atol = 0;

    /// At least one forward case ran and every case passed.
    bool passed() const {
        return forward_cases > 0 && forward_passed == forward_cases &&
               gradient_passed == gradient_cases;
    }
    /// `passed`, `failed` or `no cases` (no case of the suite covers what the kernel accepts).
    std::string status() const;
};

/// The outcome of one `capsule verify` run against one plugin library.
struct EvidenceRecord {
    std::string plugin;
    std::string version;          // the manifest's plugin version
    std::string abi;              // the manifest's ABI version, e.g. `1.1`
    std::string library;          // the library file's path when verified
    std::string library_sha256;   // lowercase hex
    std::string device;           // the plugin's device, e.g. `cpu`
    std::string driver;           // what ran it: CPU model and flags, or the device's probe text
    std::string date;             // UTC, ISO 8601 (`2026-12-01T03:04:05Z`)
    std::string host_version;     // the capsule runtime that ran the suite
    std::vector<CapsuleEvidence> capsules;

    /// `<plugin>@<first 12 hex digits of the library hash>#<first 12 hex digits of the SHA-256 of
    /// the results>`: names the record in lockfiles and reports. The date and driver are not part
    /// of it, so verifying the same library again with the same outcome keeps the id.
    std::string id() const;
    /// The results of `capsule`, or nullptr when the record has none.
    const CapsuleEvidence* find(std::string_view capsule) const;
    /// No capsule failed (a capsule that no case covers neither passed nor failed).
    bool passed() const;
};

/// What the evidence records say about one capsule's test-suite evidence on this machine.
enum class VerificationStatus : std::uint8_t {
    verified,    // a record for the library that would run it says the capsule passed
    unverified,  // no usable record (none, untrusted, malformed), or no case covers the capsule
    failed,      // the record says the capsule failed
};
template <> struct Spellings<VerificationStatus> {
    static constexpr std::string_view kind = "verification status";
    static const std::array<std::pair<VerificationStatus, std::string_view>, 3> values;
};

struct CapsuleVerification {
    VerificationStatus status = VerificationStatus::unverified;
    /// Why it is not verified, ending with the command that would verify it; "" when verified.
    std::string detail;
    /// The record consulted (EvidenceRecord::id), "" when none.
    std::string record_id;
};

nlohmann::json evidence_record_to_json(const EvidenceRecord& record);
/// Parses a record written by evidence_record_to_json. Raises Error(input)
/// `<source>: <json path>: <reason>` for a malformed or incomplete record.
EvidenceRecord parse_evidence_record(std::string_view json_text, const std::filesystem::path& source);

/// `<plugin>-<sha256>.evidence.json`.
std::string evidence_file_name(std::string_view plugin, std::string_view library_sha256);
/// The user's evidence directory: `$XDG_CACHE_HOME/capsule/evidence`, else
/// `$HOME/.cache/capsule/evidence`; empty when neither variable is set.
std::filesystem::path user_evidence_dir();
/// Where records of the plugin whose manifest is `manifest_path` are looked for, in order:
/// `<manifest directory>/evidence`, then user_evidence_dir().
std::vector<std::filesystem::path> default_evidence_dirs(const std::filesystem::path& manifest_path);

/// Creates `dir` when missing (0755, whatever the umask) and checks that records may be written
/// there: trusted on disk (no directory on its path writable by others) and writable. Returns it.
/// Raises Error(input) for an empty path, Error(other) naming the directory and the reason
/// otherwise. `capsule verify` calls it before running the suite.
std::filesystem::path prepare_evidence_dir(const std::filesystem::path& dir);

/// Writes `record` into `dir` (prepare_evidence_dir), replacing an earlier record for the same
/// library atomically: a new temporary file (O_EXCL, O_NOFOLLOW, mode 0644), then rename. Returns
/// the file written. Raises what prepare_evidence_dir raises, and Error(other) when the file
/// cannot be written.
std::filesystem::path write_evidence_record(const EvidenceRecord& record,
                                            const std::filesystem::path& dir);

/// Looks for the record of (`plugin`, `library_sha256`) in `dirs`, in order. Returns it, or
/// nullopt with `problem` saying what was missing or refused (not found in any directory, a
/// record file untrusted on disk, malformed, or for another plugin or library). Never throws.
std::optional<EvidenceRecord> find_evidence_record(const std::vector<std::filesystem::path>& dirs,
                                                   std::string_view plugin,
                                                   std::string_view library_sha256,
                                                   std::string& problem);

}  // namespace capsule
