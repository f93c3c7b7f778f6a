/*
 * The Capsule runtime's C API: load a model, plan it under a backend profile, run it.
 *
 * The same pipeline as the C++ API (DESIGN.md sections 2 and 5) behind opaque handles:
 *
 *   capsule_host_t     the discovered plugins (plugin host)
 *   capsule_profile_t  a backend profile (built-in by name, from a file or from JSON text)
 *   capsule_model_t    a model: an ONNX file or a JSON IR graph with its parameters file
 *   capsule_plan_t     an accepted plan: the model planned, lowered and gated under a profile
 *   capsule_session_t  a session built from an accepted plan; runs the model many times
 *   capsule_tensor_t   a host tensor: dtype, shape and row-major contiguous bytes
 *
 * Errors. Every function that can fail returns a `capsule_status_t*`: NULL on success, else a
 * status object with a code (capsule_status_code_t, whose values equal the `capsule` tool's exit
 * codes) and a message naming the cause. The caller owns a returned status and releases it with
 * capsule_status_release. No C++ exception ever crosses this API; a NULL handle, a NULL output
 * pointer, an unknown dtype or a size that does not match is a CAPSULE_STATUS_INPUT status, never
 * a crash. When even the status object cannot be allocated, a preallocated CAPSULE_STATUS_OTHER
 * status saying "out of memory" is returned (releasing it is harmless).
 *
 * Outputs. A function that creates an object writes it to its last argument (`out_*`), which
 * must not be NULL. The function first sets `*out_*` to NULL, and sets it to the new object only
 * on success, so on failure there is nothing to release. Optional output pointers of getters
 * (documented as such) may be NULL to skip that value.
 *
 * Ownership. Every object a `*_create`, `*_load`, `*_from_json`, `*_read_npy` or
 * `capsule_session_run` returns belongs to the caller, who releases it with the matching
 * `*_release` function; every release function accepts NULL and then does nothing. Strings and
 * arrays that getters return are borrowed: they stay valid, unchanged, until the object they came
 * from is released. Objects keep what they need from the objects they were made from: a plan
 * keeps its host, profile and model alive, a session its plan, so the caller may release them in
 * any order.
 *
 * Threads. Hosts, profiles, models, plans and sessions do not change after creation: any number
 * of threads may use them at once, and capsule_session_run in particular may be called
 * concurrently on one session. A tensor may be read from many threads; do not write its data
 * (capsule_tensor_get_mutable_data) while another thread reads it or a run uses it as an input.
 *
 * Tensors. Element types are the plugin ABI's capsule_dtype (capsule/plugin_abi.h):
 * CAPSULE_DTYPE_FLOAT32 (float), CAPSULE_DTYPE_FLOAT64 (double), CAPSULE_DTYPE_INT64 (int64_t),
 * CAPSULE_DTYPE_BOOL (one byte, 0 or 1), and since ABI 1.1 INT32, INT16, INT8, UINT64, UINT32,
 * UINT16, UINT8 (the <stdint.h> types), FLOAT16 (IEEE binary16 bits) and BFLOAT16 (a float32's
 * upper 16 bits). Data is row-major (C order) and contiguous, in the host's
 * byte order: element (i0, ..., ik) of a tensor of shape (d0, ..., dk) is at index
 * ((i0 * d1 + i1) * d2 + ...) * dk + ik. Rank 0 is a scalar with one element; a dimension may be 0.
 *
 * Status codes each function returns: CAPSULE_STATUS_INPUT for invalid arguments always, plus
 * those listed with the function. CAPSULE_STATUS_OTHER can come from any fallible function when
 * memory is exhausted or an unexpected internal error occurs.
 *
 * Names: the types of this API end in `_t`, which keeps them apart from the plugin ABI's types
 * (capsule_status, capsule_status_code, ...) in capsule/plugin_abi.h, which this header includes
 * for capsule_dtype; a file may include both.
 */
#ifndef CAPSULE_CAPSULE_H
#define CAPSULE_CAPSULE_H

#include <stddef.h>
#include <stdint.h>

#include "capsule/plugin_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define CAPSULE_C_API
#else
#define CAPSULE_C_API __attribute__((visibility("default")))
#endif

/* Version of this C API. A newer minor version only adds functions or enum values; a different
 * major version changes or removes something. Compare with capsule_c_api_version at run time. */
#define CAPSULE_C_API_MAJOR 1
#define CAPSULE_C_API_MINOR 1

/* The opaque handles (see the sections below). */
typedef struct capsule_host_t capsule_host_t;
typedef struct capsule_profile_t capsule_profile_t;
typedef struct capsule_model_t capsule_model_t;
typedef struct capsule_plan_t capsule_plan_t;
typedef struct capsule_session_t capsule_session_t;
typedef struct capsule_tensor_t capsule_tensor_t;

/* ------------------------------------------------------------------------------------------ */
/* Status                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* Why a call failed. The values equal the exit codes of the `capsule` command-line tool. */
typedef enum capsule_status_code_t {
    CAPSULE_STATUS_OK = 0,       /* success (only capsule_status_get_code(NULL) returns it) */
    CAPSULE_STATUS_OTHER = 1,    /* anything else: out of memory, a kernel failed while running, I/O */
    CAPSULE_STATUS_INPUT = 2,    /* invalid argument or bad input: NULL handle, unknown name, wrong
                                    dtype or shape, malformed or missing model/profile/tensor file,
                                    input values a kernel refuses while running */
    CAPSULE_STATUS_PLANNING = 3, /* planning failed: an op has no admissible capsule */
    CAPSULE_STATUS_GATE = 4,     /* the gate rejected the plan under the profile's acceptance policy */
    CAPSULE_STATUS_PROBE = 5     /* cannot run here: device missing or unusable, stub or failed
                                    plugin, capsule without a kernel, host OS/arch not the target's */
} capsule_status_code_t;

/* The outcome of a failed call. Owned by the caller; release with capsule_status_release. */
typedef struct capsule_status_t capsule_status_t;

/* The status's code; CAPSULE_STATUS_OK for NULL (a successful call). */
CAPSULE_C_API capsule_status_code_t capsule_status_get_code(const capsule_status_t* status);

/* The status's message (one or more lines, no trailing newline, UTF-8 as the runtime produced
 * it); "" for NULL. Borrowed from the status. */
CAPSULE_C_API const char* capsule_status_get_message(const capsule_status_t* status);

/* For CAPSULE_STATUS_PLANNING and CAPSULE_STATUS_GATE from capsule_plan_create: the plan report
 * as JSON, the object `capsule plan --json` prints ("status": "planning_failed" with "error", or
 * "rejected" with "groups" and "failures"). NULL for every other status and for NULL. Borrowed
 * from the status. */
CAPSULE_C_API const char* capsule_status_get_report_json(const capsule_status_t* status);

/* Releases a status. NULL: does nothing. */
CAPSULE_C_API void capsule_status_release(capsule_status_t* status);

/* ------------------------------------------------------------------------------------------ */
/* Versions and dtypes                                                                         */
/* ------------------------------------------------------------------------------------------ */

/* The runtime's version, e.g. "0.1.0". Static storage. */
CAPSULE_C_API const char* capsule_version(void);

/* The C API version the library implements (CAPSULE_C_API_MAJOR / _MINOR it was built with).
 * Either pointer may be NULL. */
CAPSULE_C_API void capsule_c_api_version(uint32_t* major, uint32_t* minor);

/* The dtype's spelling ("float32", "float64", "int64", "bool", "int32", "int8", "uint8", "int16",
 * "uint16", "uint32", "uint64", "float16", "bfloat16"), or NULL for a value that is not a
 * capsule_dtype. Static storage. */
CAPSULE_C_API const char* capsule_dtype_name(capsule_dtype dtype);

/* ------------------------------------------------------------------------------------------ */
/* Plugin host                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* capsule_host_create flags. */
#define CAPSULE_HOST_DEFAULT 0u
/* Search only the given directories: not the default locations, not CAPSULE_PLUGIN_PATH. */
#define CAPSULE_HOST_ONLY_GIVEN_DIRS 1u

/* Discovers plugins (DESIGN.md section 4): reads every `*.capsule.json` manifest and checks the
 * files on disk; runs no plugin code (libraries are opened when a session needs them).
 *
 * Searched in order, unless `flags` has CAPSULE_HOST_ONLY_GIVEN_DIRS: `<executable dir>/plugins`
 * and `<executable dir>/../lib/capsule/plugins` (as the `capsule` tool does); `plugins` beside
 * this library and the installed plugin directory relative to it (`<lib dir>/capsule/plugins`),
 * so that an installed libcapsule_c finds the installed plugins wherever the program is; each
 * directory of the environment variable CAPSULE_PLUGIN_PATH (colon-separated); then
 * `plugin_dirs` (`dir_count` entries; directories or manifest files; may be NULL when dir_count
 * is 0). A plugin that fails to load is recorded with its reason (capsule_host_get_plugin) and
 * skipped; that is not an error of this call.
 *
 * Returns INPUT when out_host is NULL, plugin_dirs is NULL with dir_count > 0, an entry is NULL
 * or names nothing that exists, or flags has an unknown bit.
 * Ownership: *out_host belongs to the caller (capsule_host_release). */
CAPSULE_C_API capsule_status_t* capsule_host_create(const char* const* plugin_dirs, size_t dir_count,
                                                    uint32_t flags, capsule_host_t** out_host);

/* The number of discovered plugins (loaded, available, stubs and failed ones). INPUT for NULL. */
CAPSULE_C_API capsule_status_t* capsule_host_get_plugin_count(const capsule_host_t* host, size_t* out_count);

/* Plugin `index` (0 ≤ index < count, discovery order): its name and its status, one of
 * "available", "loaded", "stub" or "failed: <reason>" (as `capsule plugins` prints it at
 * discovery). Either output may be NULL; strings are borrowed from the host.
 * INPUT for a NULL host or an index out of range. */
CAPSULE_C_API capsule_status_t* capsule_host_get_plugin(const capsule_host_t* host, size_t index,
                                                        const char** out_name, const char** out_status);

/* Releases a host. Plans and sessions made with it keep what they need. NULL: does nothing. */
CAPSULE_C_API void capsule_host_release(capsule_host_t* host);

/* ------------------------------------------------------------------------------------------ */
/* Backend profiles                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* A built-in profile by name (e.g. "checked_cpu", "onednn_cpu", "checked_cuda"; `capsule
 * profiles` lists them, profiles/ holds their JSON), or, when `name` ends in ".json", the
 * profile file at that path (as `capsule plan --profile` does).
 * INPUT: NULL argument, unknown name (the message lists every built-in name), or a profile file
 * that is missing or malformed (file, JSON path and reason).
 * Ownership: *out_profile belongs to the caller (capsule_profile_release). */
CAPSULE_C_API capsule_status_t* capsule_profile_create(const char* name, capsule_profile_t** out_profile);

/* A profile file (DESIGN.md section 7; may name a built-in `base` and override some fields).
 * INPUT: NULL argument, missing file, malformed JSON, unknown key or bad spelling. */
CAPSULE_C_API capsule_status_t* capsule_profile_load_file(const char* path, capsule_profile_t** out_profile);

/* A profile from JSON text (the same document as a profile file).
 * INPUT: NULL argument, malformed JSON, unknown key or bad spelling. */
CAPSULE_C_API capsule_status_t* capsule_profile_from_json(const char* json, capsule_profile_t** out_profile);

/* The profile's name, borrowed from the profile. INPUT for NULL arguments. */
CAPSULE_C_API capsule_status_t* capsule_profile_get_name(const capsule_profile_t* profile,
                                                         const char** out_name);

/* Releases a profile. Plans made under it keep a copy. NULL: does nothing. */
CAPSULE_C_API void capsule_profile_release(capsule_profile_t* profile);

/* ------------------------------------------------------------------------------------------ */
/* Models                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* A static shape for a graph input of an ONNX model whose declared shape has dynamic dimensions
 * (`N`, `batch`, ...). It must agree with every static dimension the model declares. */
typedef struct capsule_input_shape_t {
    const char* name;    /* the ONNX graph input's name */
    size_t rank;
    const int64_t* dims; /* rank entries; may be NULL when rank is 0 */
} capsule_input_shape_t;

/* Loads a model: a `.onnx` file through the ONNX importer (checked, shapes inferred, constants
 * folded; docs/onnx.md lists the supported ops), anything else as a JSON IR graph (DESIGN.md
 * section 7) with its parameters file. `input_shapes` (`shape_count` entries; may be NULL when
 * shape_count is 0) fixes dynamic input dimensions of an ONNX model.
 * INPUT: NULL argument; missing, unreadable or malformed file; a model the ONNX checker rejects;
 * an ONNX op, variant or dtype the importer does not map (naming op type, node and opset); a
 * dynamic dimension left unfixed; input shapes given for a JSON IR graph; an ONNX model when the
 * library was built without ONNX support (CAPSULE_WITH_ONNX=OFF).
 * Ownership: *out_model belongs to the caller (capsule_model_release). */
CAPSULE_C_API capsule_status_t* capsule_model_load(const char* path, const capsule_input_shape_t* input_shapes,
                                                   size_t shape_count, capsule_model_t** out_model);

/* The number of runtime inputs (graph inputs fed at each run; for ONNX, initializers and inputs
 * that no node reads are not counted). INPUT for NULL arguments. */
CAPSULE_C_API capsule_status_t* capsule_model_get_input_count(const capsule_model_t* model, size_t* out_count);

/* Runtime input `index` (0 ≤ index < count, model order): the name capsule_session_run takes,
 * its dtype, rank and shape (rank entries). Any output pointer may be NULL; the name and shape are
 * borrowed from the model. INPUT for a NULL model or an index out of range. */
CAPSULE_C_API capsule_status_t* capsule_model_get_input(const capsule_model_t* model, size_t index,
                                                        const char** out_name, capsule_dtype* out_dtype,
                                                        size_t* out_rank, const int64_t** out_shape);

/* The number of graph outputs. INPUT for NULL arguments. */
CAPSULE_C_API capsule_status_t* capsule_model_get_output_count(const capsule_model_t* model, size_t* out_count);

/* Graph output `index` (0 ≤ index < count, the order capsule_session_run returns outputs in): its
 * name (a JSON IR output node without a name is `output_<id>`), dtype, rank and shape, as
 * capsule_model_get_input. For an output whose length depends on the data (ONNX
 * NonMaxSuppression, NonZero: the graph's output_lengths) the shape is an upper bound, and each
 * run's tensor has the actual length along that axis. INPUT for a NULL model or an index out of
 * range. */
CAPSULE_C_API capsule_status_t* capsule_model_get_output(const capsule_model_t* model, size_t index,
                                                         const char** out_name, capsule_dtype* out_dtype,
                                                         size_t* out_rank, const int64_t** out_shape);

/* Releases a model. Plans made from it keep what they need. NULL: does nothing. */
CAPSULE_C_API void capsule_model_release(capsule_model_t* model);

/* ------------------------------------------------------------------------------------------ */
/* Accepted plans                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* Plans the model under the profile with the host's capsules (one admissible capsule per node),
 * lowers it under the profile's lowering mode and gates it under its acceptance policy. Only an
 * accepted plan is returned; nothing ever falls back silently. Opens no plugin library.
 * INPUT: NULL argument, a graph that fails its checks.
 * PLANNING: an op has no admissible capsule; the message lists the capsules considered and why
 * each was refused; capsule_status_get_report_json gives the report ("planning_failed").
 * GATE: the gate rejected the plan; the message is the text report with each failure;
 * capsule_status_get_report_json gives the report ("rejected", with "failures").
 * Ownership: *out_plan belongs to the caller (capsule_plan_release); it keeps the host, profile
 * and model alive. */
CAPSULE_C_API capsule_status_t* capsule_plan_create(const capsule_host_t* host, const capsule_profile_t* profile,
                                                    const capsule_model_t* model, capsule_plan_t** out_plan);

/* The plan report as JSON text: the object `capsule plan --json` prints, with "status":
 * "accepted", the profile, and one entry per lowered group (node ids, op, capsule, provider,
 * device, trust, vjp, runtime, grouping). Borrowed from the plan. INPUT for NULL arguments. */
CAPSULE_C_API capsule_status_t* capsule_plan_get_report_json(const capsule_plan_t* plan, const char** out_json);

/* The plan report as text for people (`capsule plan` without --json): the profile, one line
 * per group and the gate's verdict. Borrowed from the plan. INPUT for NULL arguments. */
CAPSULE_C_API capsule_status_t* capsule_plan_get_report_text(const capsule_plan_t* plan, const char** out_text);

/* Releases a plan. Sessions made from it keep what they need. NULL: does nothing. */
CAPSULE_C_API void capsule_plan_release(capsule_plan_t* plan);

/* ------------------------------------------------------------------------------------------ */
/* Sessions                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Builds a session from an accepted plan: probes the host against the profile's target and each
 * plugin the plan uses (opening their libraries), binds each node's kernel and uploads the
 * parameters once. `threads`: intra-op threads given to kernels; 0 means every core; at most 4096.
 * INPUT: NULL argument, threads negative or above 4096, parameters missing from or mistyped in the model's
 * parameters file, an ONNX model that takes parameters (e.g. a Conv weight) as graph inputs.
 * PROBE: the host's OS or architecture is not the profile target's, a plugin the plan uses is a
 * stub, failed to load or reports its device unusable (e.g. no CUDA device), or a capsule has no
 * kernel (planner-only, not-wired).
 * OTHER: device allocation or upload failed.
 * Ownership: *out_session belongs to the caller (capsule_session_release); it keeps the plan
 * alive. */
CAPSULE_C_API capsule_status_t* capsule_session_create(const capsule_plan_t* plan, int32_t threads,
                                                       capsule_session_t** out_session);

/* The number of graph outputs a run produces (capsule_model_get_output_count of its model).
 * INPUT for NULL arguments. */
CAPSULE_C_API capsule_status_t* capsule_session_get_output_count(const capsule_session_t* session,
                                                                 size_t* out_count);

/* Runs the model once. Safe to call from many threads at once on one session.
 *
 * Inputs: `input_count` pairs of input_names[i] and inputs[i], one per runtime input of the model
 * (capsule_model_get_input), each with exactly the declared dtype and shape; in any order. For an
 * ONNX model an input that no node reads may be given too and is ignored.
 * Outputs: with `output_names` NULL, `output_count` must equal capsule_session_get_output_count
 * and outputs[i] receives graph output i; otherwise outputs[i] receives the output named
 * output_names[i] (distinct names of capsule_model_get_output). Every outputs[i] is first set to
 * NULL; on success each is a new host tensor that the caller releases with capsule_tensor_release;
 * on failure none is set.
 * INPUT: NULL session, NULL arrays with a non-zero count, a NULL name or tensor, a name given
 * twice, a missing or unknown input, an input whose dtype or shape differs from the declared one,
 * an unknown output name, output_count not matching; an input's values that a kernel refuses
 * (CAPSULE_ERROR_INVALID_DATA: an index out of range, an integer division by zero).
 * OTHER: a kernel failed otherwise (the message names the node, the capsule and the plugin's
 * message). */
CAPSULE_C_API capsule_status_t* capsule_session_run(const capsule_session_t* session,
                                                    const char* const* input_names,
                                                    const capsule_tensor_t* const* inputs, size_t input_count,
                                                    const char* const* output_names,
                                                    capsule_tensor_t** outputs, size_t output_count);

/* Releases a session. Do not release it while a run on it is in flight. NULL: does nothing. */
CAPSULE_C_API void capsule_session_release(capsule_session_t* session);

/* ------------------------------------------------------------------------------------------ */
/* Tensors                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* A host tensor of `dtype` and `shape` (`rank` entries, each ≥ 0; shape may be NULL when rank is
 * 0), holding a copy of `data`: `byte_size` bytes, row-major, which must equal the element count
 * times the dtype's size. With `data` NULL the tensor is zero-filled and byte_size must be 0.
 * INPUT: NULL out_tensor, a dtype that is not a capsule_dtype, NULL shape with rank > 0, rank
 * above 64, a negative dimension, a size past 2^63-1 bytes, byte_size not matching, a bool element that is
 * neither 0 nor 1. OTHER: out of memory.
 * Ownership: *out_tensor belongs to the caller (capsule_tensor_release); `data` stays the
 * caller's. */
CAPSULE_C_API capsule_status_t* capsule_tensor_create(capsule_dtype dtype, const int64_t* shape, size_t rank,
                                                      const void* data, size_t byte_size,
                                                      capsule_tensor_t** out_tensor);

/* The tensor's dtype, rank, shape (rank entries, borrowed from the tensor) and element count
 * (the product of the dimensions; 1 for rank 0). Any output pointer may be NULL.
 * INPUT for a NULL tensor. */
CAPSULE_C_API capsule_status_t* capsule_tensor_get_info(const capsule_tensor_t* tensor, capsule_dtype* out_dtype,
                                                        size_t* out_rank, const int64_t** out_shape,
                                                        int64_t* out_element_count);

/* The tensor's bytes (row-major, borrowed from the tensor; NULL or a valid pointer when the
 * tensor has no elements) and their count. Either output pointer may be NULL.
 * INPUT for a NULL tensor. */
CAPSULE_C_API capsule_status_t* capsule_tensor_get_data(const capsule_tensor_t* tensor, const void** out_data,
                                                        size_t* out_byte_size);

/* The same, writable: the caller may change the values in place (not the size), e.g. to refill
 * an input between runs. INPUT for a NULL tensor. */
CAPSULE_C_API capsule_status_t* capsule_tensor_get_mutable_data(capsule_tensor_t* tensor, void** out_data,
                                                                size_t* out_byte_size);

/* Reads a NumPy .npy file (float32 `<f4`, float64 `<f8`, float16 `<f2`, int64 `<i8`, int32 `<i4`,
 * int16 `<i2`, int8 `|i1`, uint64 `<u8`, uint32 `<u4`, uint16 `<u2`, uint8 `|u1`, bool `|b1`; C
 * order; numpy has no bfloat16).
 * INPUT: NULL argument, missing file, bad header, truncated data, Fortran order, another dtype.
 * Ownership: *out_tensor belongs to the caller (capsule_tensor_release). */
CAPSULE_C_API capsule_status_t* capsule_tensor_read_npy(const char* path, capsule_tensor_t** out_tensor);

/* Writes the tensor as a NumPy .npy file (format 1.0).
 * INPUT: NULL argument, a bfloat16 tensor (numpy has no such type). OTHER: the file cannot be
 * written. */
CAPSULE_C_API capsule_status_t* capsule_tensor_write_npy(const capsule_tensor_t* tensor, const char* path);

/* Releases a tensor. NULL: does nothing. */
CAPSULE_C_API void capsule_tensor_release(capsule_tensor_t* tensor);

#ifdef __cplusplus
}
#endif

#endif /* CAPSULE_CAPSULE_H */
