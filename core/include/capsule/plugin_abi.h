/*
 * The Capsule plugin C ABI, version 1.1 (DESIGN.md sections 4 and 10).
 *
 * A plugin library exports one symbol, `capsule_plugin_entry`, returning a static
 * `capsule_plugin` table. Everything that crosses the boundary is plain C: no C++ types, no
 * exceptions, no ownership transfer except through the functions named here.
 *
 * Versioning (after the PJRT C API): every struct starts with `struct_size`, set by whoever fills
 * the struct to `sizeof` of the struct as it knows it. A reader uses only the fields that lie
 * within both its own and the writer's size (CAPSULE_HAS_FIELD). A newer minor version only ever
 * appends fields; a different major version is refused by the host with both versions named.
 * Arrays of versioned structs carry their element size (`kernel_entry_size`), so a newer minor may
 * append fields to an array element too: the host steps through the array by the stated size and
 * reads only the fields it knows.
 *
 * Field marks (after PJRT): `in` is set by the host, `out` by the plugin; a pointer is borrowed
 * for the duration of the call unless its comment gives a longer lifetime. Appending a field
 * bumps the minor version; changing or removing one bumps the major.
 *
 * Threading: the host calls kernels from many threads at once on different buffers. Kernels must
 * be reentrant; plugin-global state is allowed only if it is immutable after `init`.
 *
 * Memory: all tensors are row-major. `strides` are in elements. On the CPU the host allocates
 * buffers; on other devices it allocates through the plugin's `capsule_device_interface`.
 */
#ifndef CAPSULE_PLUGIN_ABI_H
#define CAPSULE_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CAPSULE_ABI_MAJOR 1
#define CAPSULE_ABI_MINOR 1

#if defined(_WIN32)
#define CAPSULE_EXPORT __declspec(dllexport)
#else
#define CAPSULE_EXPORT __attribute__((visibility("default")))
#endif

/* True when the struct at `ptr` (whose writer set struct_size) contains `field`. */
#define CAPSULE_HAS_FIELD(ptr, type, field) \
    ((ptr)->struct_size >= offsetof(type, field) + sizeof(((type*)0)->field))

/* Status codes returned by every plugin function. */
typedef enum capsule_status_code {
    CAPSULE_OK = 0,
    CAPSULE_ERROR_INVALID_ARGUMENT = 1, /* bad shapes, dtypes or attributes */
    CAPSULE_ERROR_UNSUPPORTED = 2,      /* a dtype or case the kernel does not implement */
    CAPSULE_ERROR_DEVICE = 3,           /* device or driver failure */
    CAPSULE_ERROR_OUT_OF_MEMORY = 4,
    CAPSULE_ERROR_INTERNAL = 5,
    /* The values of an input refused while running (an index out of range, an integer division by
     * zero), where its shape, dtype and attributes are valid: the caller's data, which the host
     * reports as bad input (capsule::ErrorCode::input; `capsule serve` answers 400). Added to ABI
     * 1.1 without a version change: a host that predates it reports it as any other failure. */
    CAPSULE_ERROR_INVALID_DATA = 6
} capsule_status_code;

#define CAPSULE_STATUS_MESSAGE_SIZE 512

/* Filled by the plugin when a call fails: a code and a NUL-terminated message naming the cause. */
typedef struct capsule_status {
    size_t struct_size;
    int32_t code;
    char message[CAPSULE_STATUS_MESSAGE_SIZE];
} capsule_status;

/* Element types; values match capsule::DType. */
typedef enum capsule_dtype {
    CAPSULE_DTYPE_FLOAT32 = 0,
    CAPSULE_DTYPE_FLOAT64 = 1,
    CAPSULE_DTYPE_INT64 = 2,
    CAPSULE_DTYPE_BOOL = 3, /* one byte, 0 or 1 */
    /* ABI 1.1 (appended; a kernel receives them only when its entry's `dtypes` lists them): */
    CAPSULE_DTYPE_INT32 = 4,
    CAPSULE_DTYPE_INT8 = 5,
    CAPSULE_DTYPE_UINT8 = 6,
    CAPSULE_DTYPE_INT16 = 7,
    CAPSULE_DTYPE_UINT16 = 8,
    CAPSULE_DTYPE_UINT32 = 9,
    CAPSULE_DTYPE_UINT64 = 10,
    CAPSULE_DTYPE_FLOAT16 = 11,  /* IEEE 754 binary16, stored as its 16 bits */
    CAPSULE_DTYPE_BFLOAT16 = 12  /* the upper 16 bits of a float32 */
} capsule_dtype;

/* A set of dtypes as a bit mask: bit (1 << dtype) per member. */
#define CAPSULE_DTYPE_BIT(dtype) (UINT64_C(1) << (dtype))
/* The dtypes of ABI 1.0: what a kernel entry without a `dtypes` mask (or with 0) accepts. */
#define CAPSULE_DTYPES_1_0                                                                        \
    (CAPSULE_DTYPE_BIT(CAPSULE_DTYPE_FLOAT32) | CAPSULE_DTYPE_BIT(CAPSULE_DTYPE_FLOAT64) |         \
     CAPSULE_DTYPE_BIT(CAPSULE_DTYPE_INT64) | CAPSULE_DTYPE_BIT(CAPSULE_DTYPE_BOOL))

/* Devices; values match capsule::Device. */
typedef enum capsule_device {
    CAPSULE_DEVICE_CPU = 0,
    CAPSULE_DEVICE_CUDA = 1,
    CAPSULE_DEVICE_ROCM = 2,
    CAPSULE_DEVICE_METAL = 3,
    CAPSULE_DEVICE_WASM = 4,
    CAPSULE_DEVICE_TPU = 5,
    CAPSULE_DEVICE_TRAINIUM = 6,
    CAPSULE_DEVICE_CUSTOM = 7,
    CAPSULE_DEVICE_EXTERNAL = 8
} capsule_device;

/* A borrowed view of a tensor. `data` points at device memory for non-CPU devices. */
typedef struct capsule_tensor_view {
    size_t struct_size;
    int32_t dtype;          /* capsule_dtype */
    int32_t device;         /* capsule_device */
    int32_t rank;
    const int64_t* shape;   /* rank entries */
    const int64_t* strides; /* rank entries, in elements (row-major contiguous from the host) */
    void* data;
} capsule_tensor_view;

typedef enum capsule_attribute_kind {
    CAPSULE_ATTR_INT = 0,
    CAPSULE_ATTR_FLOAT = 1,
    CAPSULE_ATTR_BOOL = 2,
    CAPSULE_ATTR_STRING = 3,
    CAPSULE_ATTR_INTS = 4,
    CAPSULE_ATTR_FLOATS = 5
} capsule_attribute_kind;

/* One node attribute (docs/ops.md lists the attributes of every op). */
typedef struct capsule_attribute {
    size_t struct_size;
    const char* name;
    int32_t kind;          /* capsule_attribute_kind */
    int64_t int_value;     /* INT, BOOL (0/1) */
    double float_value;    /* FLOAT */
    const char* string_value;  /* STRING */
    const int64_t* ints;   /* INTS */
    const double* floats;  /* FLOATS */
    size_t count;          /* entries of ints/floats */
} capsule_attribute;

/* Arguments of a forward kernel. The host allocates every output with the shape and dtype of
 * shape inference before the call. `params` are the node's parameters (weights) in the order
 * docs/ops.md gives for the op. */
typedef struct capsule_forward_args {
    size_t struct_size;
    const capsule_tensor_view* inputs;
    size_t num_inputs;
    const capsule_tensor_view* params;
    size_t num_params;
    const capsule_tensor_view* outputs;
    size_t num_outputs;
    const capsule_attribute* attrs;
    size_t num_attrs;
    void* stream; /* device stream for non-CPU devices, else NULL */
    /* ABI 1.1: the state the kernel's `prepare` returned for this node (NULL when it has none). */
    void* state;
} capsule_forward_args;

/* Arguments of a backward kernel (vector-Jacobian product). `grad_outputs` match `outputs`;
 * the plugin writes `grad_inputs` and `grad_params` (same shapes as inputs/params). A grad view
 * whose `data` is NULL is not needed and must not be written. Gradients are overwritten, not
 * accumulated. */
typedef struct capsule_backward_args {
    size_t struct_size;
    const capsule_tensor_view* inputs;
    size_t num_inputs;
    const capsule_tensor_view* params;
    size_t num_params;
    const capsule_tensor_view* outputs;
    size_t num_outputs;
    const capsule_tensor_view* grad_outputs;
    const capsule_tensor_view* grad_inputs;
    const capsule_tensor_view* grad_params;
    const capsule_attribute* attrs;
    size_t num_attrs;
    void* stream;
    /* ABI 1.1: the state the kernel's `prepare` returned for this node (NULL when it has none). */
    void* state;
} capsule_backward_args;

/* ABI 1.1: what a kernel's `prepare` sees of one node when a session is created. Inputs and
 * outputs carry shapes and dtypes only (`data` is NULL); parameters carry their data, which stays
 * valid and unchanged until the state is released (weights may be reordered into the layout a
 * primitive wants and kept in the state). A host that changes parameter values in place
 * (Session::refresh_parameters, after optimizer steps) prepares the node again and then releases
 * the old state. */
typedef struct capsule_prepare_args {
    size_t struct_size;
    const capsule_tensor_view* inputs;
    size_t num_inputs;
    const capsule_tensor_view* params;
    size_t num_params;
    const capsule_tensor_view* outputs;
    size_t num_outputs;
    const capsule_attribute* attrs;
    size_t num_attrs;
    int32_t num_threads; /* intra-op threads the kernel may use (ExecutionConfig), at least 1 */
    /* Appended in ABI 1.1 (present when struct_size covers it; absent means STRICT): the float32
     * arithmetic the profile allows, capsule_fpmath_mode. */
    int32_t fpmath;
} capsule_prepare_args;

/* The float32 arithmetic a profile allows (its config's `fpmath`). A permission, never a demand:
 * a kernel may always compute in float32.
 *   STRICT: float32 throughout.
 *   BF16:   float32 inputs and weights may be rounded to bfloat16 (8-bit significand) with
 *           float32 accumulation, as oneDNN's fpmath_mode bf16; a kernel that does so states the
 *           tolerance in its manifest's value claim. */
typedef enum capsule_fpmath_mode {
    CAPSULE_FPMATH_STRICT = 0,
    CAPSULE_FPMATH_BF16 = 1
} capsule_fpmath_mode;

typedef int32_t (*capsule_forward_fn)(const capsule_forward_args* args, capsule_status* status);
/* ABI 1.1: builds a node's state (`*state`, may stay NULL); called once per node at session
 * creation, and again when the host refreshes the parameters (the old state is released after),
 * never per call. The state is handed to every forward/backward call of the node, from many
 * threads at once: kernels must treat it as read-only or synchronise. */
typedef int32_t (*capsule_prepare_fn)(const capsule_prepare_args* args, void** state,
                                      capsule_status* status);
/* ABI 1.1: frees what `prepare` returned; called once per state, when the session is destroyed or
 * a parameter refresh replaced it. */
typedef void (*capsule_release_fn)(void* state);
typedef int32_t (*capsule_backward_fn)(const capsule_backward_args* args, capsule_status* status);

/* The kernels of one capsule, named as in the plugin's manifest. An entry of the table's `kernels`
 * array; `struct_size` is the size its writer knew (ABI 1.0: up to `backward`). */
typedef struct capsule_kernel {
    size_t struct_size;
    const char* capsule_name;
    capsule_forward_fn forward;   /* required */
    capsule_backward_fn backward; /* NULL when the capsule has no backward kernel */
    capsule_prepare_fn prepare;   /* ABI 1.1, optional: per-node state made once per session */
    capsule_release_fn release;   /* ABI 1.1: required when `prepare` is set */
    /* ABI 1.1: the dtypes the kernel accepts in its inputs, parameters and outputs, as
     * CAPSULE_DTYPE_BIT flags; 0 (or an entry that predates the field) means CAPSULE_DTYPES_1_0.
     * The manifest generator writes it into the capsule's manifest entry, and the planner admits
     * the capsule only for nodes whose every tensor has one of these dtypes, so a kernel is never
     * handed a dtype it did not declare. */
    uint64_t dtypes;
} capsule_kernel;

/* Memory and copies for a non-CPU device. All sizes in bytes. */
typedef struct capsule_device_interface {
    size_t struct_size;
    int32_t (*allocate)(size_t bytes, void** out, capsule_status* status);
    void (*release)(void* pointer);
    int32_t (*copy_to_device)(void* device_dst, const void* host_src, size_t bytes,
                              capsule_status* status);
    int32_t (*copy_to_host)(void* host_dst, const void* device_src, size_t bytes,
                            capsule_status* status);
    int32_t (*synchronize)(capsule_status* status);
} capsule_device_interface;

/* Optional capability, linked as a list (PJRT-style), so the plugin table never has to grow for
 * an optional feature. An extension struct starts with this header; `struct_size` is the size of
 * the whole extension struct its writer knew. Types the host does not know are skipped. */
typedef struct capsule_extension {
    size_t struct_size;
    int32_t type; /* capsule_extension_type */
    const struct capsule_extension* next;
} capsule_extension;

typedef enum capsule_extension_type {
    CAPSULE_EXTENSION_COMPILED_GROUPS = 1, /* ABI 1.1: capsule_compiled_groups_extension */
    CAPSULE_EXTENSION_GROUP_AUTOGRAD = 2   /* ABI 1.1: capsule_group_autograd_extension */
} capsule_extension_type;

/* ABI 1.1, compiled groups (DESIGN.md section 10). A run of consecutive planned nodes whose
 * capsules all come from one plugin may be handed to that plugin as a whole, once, when a session
 * is created: the plugin compiles it into one executable and may fuse inside it (a convolution
 * and the ReLU after it as one oneDNN primitive with a post-op, say). Planning does not change:
 * each node keeps the capsule the planner chose, and the plugin must compute exactly what those
 * capsules compute node by node.
 *
 * Values (tensors) are named by their index in the group's `values` array. A value's role says
 * who writes it and who reads it:
 *   INPUT:    made outside the group (a graph input, a constant, an earlier node); read-only.
 *   OUTPUT:   made by a node of the group and read after it (a later node or a graph output):
 *             the executable must write it.
 *   INTERNAL: made and read only inside the group: the executable may leave its buffer unwritten
 *             (when it fused the node that makes it) or use it as scratch. */
typedef enum capsule_value_role {
    CAPSULE_VALUE_INPUT = 0,
    CAPSULE_VALUE_OUTPUT = 1,
    CAPSULE_VALUE_INTERNAL = 2
} capsule_value_role;

/* One node of a group; the group's `nodes` array is in execution order (every value a node reads
 * is an INPUT or made by an earlier node of the group). */
typedef struct capsule_group_node {
    size_t struct_size;
    int64_t node_id;          /* the graph's node id, for messages */
    const char* capsule_name; /* the capsule the planner chose (declared by this plugin) */
    const size_t* inputs;     /* num_inputs indices into the group's values */
    size_t num_inputs;
    size_t output;            /* index into the group's values */
    const capsule_tensor_view* params; /* with data, valid and unchanged until release */
    size_t num_params;
    const capsule_attribute* attrs; /* valid and unchanged until release, like params */
    size_t num_attrs;
} capsule_group_node;

/* What `compile` sees of a group. Value views carry shapes and dtypes only (`data` is NULL). */
typedef struct capsule_group_args {
    size_t struct_size;
    const capsule_group_node* nodes; /* num_nodes entries, node_entry_size bytes apart */
    size_t num_nodes;
    size_t node_entry_size;
    const capsule_tensor_view* values;
    const int32_t* value_roles; /* capsule_value_role, one per value */
    size_t num_values;
    int32_t num_threads; /* intra-op threads the executable may use, at least 1 */
    /* Appended in ABI 1.1 (present when struct_size covers it; absent means STRICT):
     * capsule_fpmath_mode, as in capsule_prepare_args. */
    int32_t fpmath;
} capsule_group_args;

/* `compile` sets `*executable` (NULL: the plugin declines the group, and the host calls the
 * nodes' kernels one by one as without this extension) and writes into `description` (at most
 * `description_size` bytes, NUL-terminated) what it fused, e.g. "conv2d+relu (post-op)", or
 * an empty string. Called once per group at session creation, and again when the host refreshes
 * the parameters (the old executable is released after; the new one may decline). */
typedef int32_t (*capsule_group_compile_fn)(const capsule_group_args* args, void** executable,
                                            char* description, size_t description_size,
                                            capsule_status* status);
/* Runs a compiled group: `values` in the order and with the shapes of compile's `values`, each
 * with `data` set (host buffers on the CPU, device buffers otherwise; INTERNAL values have
 * buffers too). Called from many threads at once with different buffers: the executable must be
 * treated as read-only or synchronised. */
typedef int32_t (*capsule_group_run_fn)(void* executable, const capsule_tensor_view* values,
                                        size_t num_values, void* stream, capsule_status* status);
/* Frees what compile returned; called once per executable, when the session is destroyed or a
 * parameter refresh replaced it. A record made by the executable may outlive it. */
typedef void (*capsule_group_release_fn)(void* executable);

typedef struct capsule_compiled_groups_extension {
    capsule_extension base; /* type CAPSULE_EXTENSION_COMPILED_GROUPS */
    capsule_group_compile_fn compile;
    capsule_group_run_fn run;
    capsule_group_release_fn release;
} capsule_compiled_groups_extension;

/* ABI 1.1, external autograd (VJP mode `external-autograd`, DESIGN.md section 5): the provider's
 * own autograd owns the forward and backward of a compiled group. A plugin offering this extension
 * offers the compiled-groups extension too, and `executable` is what its `compile` returned. The
 * group's parameters are numbered in node order, then in each node's parameter order.
 *
 * `record` runs the group like `run` (same `values`) and keeps in `*record` (never NULL on
 * success) what a backward pass needs (e.g. torch's autograd graph). `value_needs_grad` (one flag
 * per value) marks the INPUT values and `param_needs_grad` (one per parameter) the parameters whose
 * gradients the host will ask for; others need none. Buffers of INPUT values stay valid and
 * unchanged until the record is released. A training loop's optimizer updates the parameters in
 * place between recorded runs, so `record` must read them on every call, never from a copy made at
 * compile time. */
typedef struct capsule_group_record_args {
    size_t struct_size;
    const capsule_tensor_view* values; /* as capsule_group_run_fn's, with data */
    size_t num_values;
    const uint8_t* value_needs_grad; /* num_values flags (1: gradient wanted) */
    const uint8_t* param_needs_grad; /* num_params flags */
    size_t num_params;
    void* stream;
} capsule_group_record_args;

/* One backward pass of a record; may be called more than once for the same record. `grad_values`
 * has one view per value (compile's shapes and dtypes): for an OUTPUT value, `data` is the
 * gradient of the loss with respect to it (read-only; NULL: zero); for an INPUT value whose flag
 * was set, where its gradient goes (NULL: not needed); INTERNAL values have NULL. `grad_params`
 * has one view per parameter, NULL data when not needed. Gradients are overwritten, never
 * accumulated; a gradient that nothing depends on is written as zeros. */
typedef struct capsule_group_backward_args {
    size_t struct_size;
    void* record;
    const capsule_tensor_view* grad_values;
    size_t num_values;
    const capsule_tensor_view* grad_params;
    size_t num_params;
    void* stream;
} capsule_group_backward_args;

typedef int32_t (*capsule_group_record_fn)(void* executable, const capsule_group_record_args* args,
                                           void** record, capsule_status* status);
typedef int32_t (*capsule_group_backward_fn)(void* executable, const capsule_group_backward_args* args,
                                             capsule_status* status);
/* Frees what record returned; called once, when the host's tape is destroyed, which may be after
 * the session released the executable (the library stays loaded until then): a record must not
 * need its executable to be freed. */
typedef void (*capsule_group_release_record_fn)(void* record);

typedef struct capsule_group_autograd_extension {
    capsule_extension base; /* type CAPSULE_EXTENSION_GROUP_AUTOGRAD */
    capsule_group_record_fn record;
    capsule_group_backward_fn backward;
    capsule_group_release_record_fn release_record;
} capsule_group_autograd_extension;

/* The table a plugin library returns. */
typedef struct capsule_plugin {
    size_t struct_size;
    uint32_t abi_major;
    uint32_t abi_minor;
    const char* name;    /* must equal the manifest's name */
    const char* version; /* must equal the manifest's version */
    int32_t device;      /* capsule_device; must equal the manifest's device */
    /* Called once after loading; NULL when there is nothing to set up. */
    int32_t (*init)(capsule_status* status);
    /* Called once before unloading; may be NULL. */
    void (*shutdown)(void);
    /* Is the device usable here? CAPSULE_OK, or an error whose message says why not. */
    int32_t (*probe)(capsule_status* status);
    /* `num_kernels` entries, each `kernel_entry_size` bytes apart (ABI 1.0 tables, which end before
     * `kernel_entry_size`, use 1.0's sizeof(capsule_kernel)). Static: lives as long as the
     * library. */
    const capsule_kernel* kernels;
    size_t num_kernels;
    const capsule_device_interface* device_interface; /* NULL for CPU plugins */
    const capsule_extension* extensions;              /* NULL when none */
    /* ABI 1.1: the distance in bytes between consecutive `kernels` entries, normally
     * sizeof(capsule_kernel) as the plugin was compiled. Must be at least ABI 1.0's entry size
     * (CAPSULE_KERNEL_ENTRY_SIZE_1_0) and not 0. */
    size_t kernel_entry_size;
} capsule_plugin;

/* Sizes of ABI 1.0's structs, for readers of older plugins. */
#define CAPSULE_KERNEL_ENTRY_SIZE_1_0 (offsetof(capsule_kernel, backward) + sizeof(capsule_backward_fn))
#define CAPSULE_PLUGIN_TABLE_SIZE_1_0 (offsetof(capsule_plugin, extensions) + sizeof(const capsule_extension*))

/* The one exported symbol. The host passes its ABI version; the plugin may refuse a host it
 * cannot serve by returning NULL. */
typedef const capsule_plugin* (*capsule_plugin_entry_fn)(uint32_t host_abi_major,
                                                         uint32_t host_abi_minor);
#define CAPSULE_PLUGIN_ENTRY_SYMBOL "capsule_plugin_entry"

#ifdef __cplusplus
}
#endif

#endif /* CAPSULE_PLUGIN_ABI_H */
