/* A C program that embeds the Capsule runtime through its C API (capsule/capsule.h): it loads a
 * model, plans it under a backend profile, prints the plan report, fills every model input with
 * deterministic values, runs the model and prints each output.
 *
 * Usage: c_embed MODEL [PROFILE]
 *   MODEL    an ONNX model (.onnx) or a JSON IR graph, e.g. examples/c_embed/mlp.onnx
 *   PROFILE  a built-in profile name (default checked_cpu) or a profile .json file
 * Plugins are found beside the program, beside libcapsule_c and in CAPSULE_PLUGIN_PATH.
 * Input values: element i is ((i % 5) - 2) * 0.5 for float inputs, i % 5 for int64, i % 2 for bool.
 * Exit status: 0, or the status code of the call that failed (the `capsule` tool's exit codes).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capsule/capsule.h"

/* Prints a failed call's message, releases the status and returns its code. */
static int report_failure(const char* what, capsule_status_t* status) {
    int code = (int)capsule_status_get_code(status);
    fprintf(stderr, "c_embed: %s: %s\n", what, capsule_status_get_message(status));
    capsule_status_release(status);
    return code;
}

static void print_shape(size_t rank, const int64_t* shape) {
    size_t d;
    printf("[");
    for (d = 0; d < rank; ++d) printf("%s%lld", d ? ", " : "", (long long)shape[d]);
    printf("]");
}

static size_t dtype_size(capsule_dtype dtype) {
    switch (dtype) {
        case CAPSULE_DTYPE_FLOAT64:
        case CAPSULE_DTYPE_INT64:
        case CAPSULE_DTYPE_UINT64: return 8;
        case CAPSULE_DTYPE_FLOAT32:
        case CAPSULE_DTYPE_INT32:
        case CAPSULE_DTYPE_UINT32: return 4;
        case CAPSULE_DTYPE_INT16:
        case CAPSULE_DTYPE_UINT16:
        case CAPSULE_DTYPE_FLOAT16:
        case CAPSULE_DTYPE_BFLOAT16: return 2;
        case CAPSULE_DTYPE_BOOL:
        case CAPSULE_DTYPE_INT8:
        case CAPSULE_DTYPE_UINT8: return 1;
    }
    return 0;
}

/* A float16's value (IEEE binary16: 1 sign, 5 exponent, 10 fraction bits). */
static double float16_value(uint16_t h) {
    const int exponent = (h >> 10) & 0x1f, fraction = h & 0x3ff;
    const double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (exponent == 0x1f) return fraction ? NAN : sign * INFINITY;
    if (exponent == 0) return sign * ldexp(fraction, -24);
    return sign * ldexp(fraction + 1024, exponent - 25);
}

/* Element i of a tensor's data, as double. */
static double element(capsule_dtype dtype, const void* data, int64_t i) {
    switch (dtype) {
        case CAPSULE_DTYPE_FLOAT32: return ((const float*)data)[i];
        case CAPSULE_DTYPE_FLOAT64: return ((const double*)data)[i];
        case CAPSULE_DTYPE_INT64: return (double)((const int64_t*)data)[i];
        case CAPSULE_DTYPE_BOOL: return ((const unsigned char*)data)[i];
        case CAPSULE_DTYPE_INT32: return ((const int32_t*)data)[i];
        case CAPSULE_DTYPE_INT16: return ((const int16_t*)data)[i];
        case CAPSULE_DTYPE_INT8: return ((const int8_t*)data)[i];
        case CAPSULE_DTYPE_UINT64: return (double)((const uint64_t*)data)[i];
        case CAPSULE_DTYPE_UINT32: return ((const uint32_t*)data)[i];
        case CAPSULE_DTYPE_UINT16: return ((const uint16_t*)data)[i];
        case CAPSULE_DTYPE_UINT8: return ((const uint8_t*)data)[i];
        case CAPSULE_DTYPE_FLOAT16: return float16_value(((const uint16_t*)data)[i]);
        case CAPSULE_DTYPE_BFLOAT16: {  /* the upper half of a float32 */
            const uint32_t bits = (uint32_t)((const uint16_t*)data)[i] << 16;
            float f;
            memcpy(&f, &bits, sizeof f);
            return f;
        }
    }
    return 0.0;
}

/* A tensor of the given type whose element i is the documented deterministic value. */
static capsule_status_t* make_input(capsule_dtype dtype, size_t rank, const int64_t* shape,
                                    capsule_tensor_t** out) {
    capsule_status_t* status;
    void* data;
    size_t byte_size, d;
    int64_t count = 1, i;
    for (d = 0; d < rank; ++d) count *= shape[d];
    /* A zero-filled tensor of the right size, then its values written in place. */
    status = capsule_tensor_create(dtype, shape, rank, NULL, 0, out);
    if (status) return status;
    status = capsule_tensor_get_mutable_data(*out, &data, &byte_size);
    if (status) return status;
    for (i = 0; i < count && (size_t)i * dtype_size(dtype) < byte_size; ++i) {
        switch (dtype) {
            case CAPSULE_DTYPE_FLOAT32: ((float*)data)[i] = (float)((i % 5) - 2) * 0.5f; break;
            case CAPSULE_DTYPE_FLOAT64: ((double*)data)[i] = (double)((i % 5) - 2) * 0.5; break;
            case CAPSULE_DTYPE_INT64: ((int64_t*)data)[i] = i % 5; break;
            case CAPSULE_DTYPE_BOOL: ((unsigned char*)data)[i] = (unsigned char)(i % 2); break;
            case CAPSULE_DTYPE_INT32: ((int32_t*)data)[i] = (int32_t)(i % 5); break;
            case CAPSULE_DTYPE_INT16: ((int16_t*)data)[i] = (int16_t)(i % 5); break;
            case CAPSULE_DTYPE_INT8: ((int8_t*)data)[i] = (int8_t)(i % 5); break;
            case CAPSULE_DTYPE_UINT64: ((uint64_t*)data)[i] = (uint64_t)(i % 5); break;
            case CAPSULE_DTYPE_UINT32: ((uint32_t*)data)[i] = (uint32_t)(i % 5); break;
            case CAPSULE_DTYPE_UINT16: ((uint16_t*)data)[i] = (uint16_t)(i % 5); break;
            case CAPSULE_DTYPE_UINT8: ((uint8_t*)data)[i] = (uint8_t)(i % 5); break;
            case CAPSULE_DTYPE_FLOAT16: /* (i % 5 - 2) / 2: -1, -0.5, 0, 0.5, 1 as binary16 bits */
                ((uint16_t*)data)[i] = (uint16_t[]){0xbc00, 0xb800, 0x0000, 0x3800, 0x3c00}[i % 5]; break;
            case CAPSULE_DTYPE_BFLOAT16:
                ((uint16_t*)data)[i] = (uint16_t[]){0xbf80, 0xbf00, 0x0000, 0x3f00, 0x3f80}[i % 5]; break;
        }
    }
    return NULL;
}

int main(int argc, char** argv) {
    const char* model_path;
    const char* profile_name = "checked_cpu";
    capsule_host_t* host = NULL;
    capsule_profile_t* profile = NULL;
    capsule_model_t* model = NULL;
    capsule_plan_t* plan = NULL;
    capsule_session_t* session = NULL;
    const char** input_names = NULL;
    capsule_tensor_t** inputs = NULL;
    capsule_tensor_t** outputs = NULL;
    capsule_status_t* status;
    size_t input_count = 0, output_count = 0, i;
    const char* report;
    uint32_t major, minor;
    int rc = 0;

    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: c_embed MODEL [PROFILE]\n");
        return 2;
    }
    model_path = argv[1];
    if (argc == 3) profile_name = argv[2];
    capsule_c_api_version(&major, &minor);
    printf("capsule %s, C API %u.%u\n", capsule_version(), (unsigned)major, (unsigned)minor);

    if ((status = capsule_host_create(NULL, 0, CAPSULE_HOST_DEFAULT, &host))) {
        rc = report_failure("discovering plugins", status);
        goto done;
    }
    if ((status = capsule_profile_create(profile_name, &profile))) {
        rc = report_failure("profile", status);
        goto done;
    }
    if ((status = capsule_model_load(model_path, NULL, 0, &model))) {
        rc = report_failure("loading the model", status);
        goto done;
    }

    /* Plan, lower and gate. A refused plan still has a report: the status carries it. */
    if ((status = capsule_plan_create(host, profile, model, &plan))) {
        if (capsule_status_get_report_json(status))
            printf("plan report:\n%s\n", capsule_status_get_report_json(status));
        rc = report_failure("planning", status);
        goto done;
    }
    if ((status = capsule_plan_get_report_json(plan, &report))) {
        rc = report_failure("plan report", status);
        goto done;
    }
    printf("plan report:\n%s\n", report);

    if ((status = capsule_session_create(plan, 0, &session))) {
        rc = report_failure("creating the session", status);
        goto done;
    }

    /* One tensor per declared model input. */
    if ((status = capsule_model_get_input_count(model, &input_count))) {
        rc = report_failure("model inputs", status);
        goto done;
    }
    input_names = calloc(input_count ? input_count : 1, sizeof *input_names);
    inputs = calloc(input_count ? input_count : 1, sizeof *inputs);
    if (!input_names || !inputs) {
        fprintf(stderr, "c_embed: out of memory\n");
        rc = 1;
        goto done;
    }
    for (i = 0; i < input_count; ++i) {
        capsule_dtype dtype;
        size_t rank;
        const int64_t* shape;
        if ((status = capsule_model_get_input(model, i, &input_names[i], &dtype, &rank, &shape)) ||
            (status = make_input(dtype, rank, shape, &inputs[i]))) {
            rc = report_failure("making an input", status);
            goto done;
        }
        printf("input %s %s ", input_names[i], capsule_dtype_name(dtype));
        print_shape(rank, shape);
        printf("\n");
    }

    /* Run; every output, in the model's order. */
    if ((status = capsule_session_get_output_count(session, &output_count))) {
        rc = report_failure("session outputs", status);
        goto done;
    }
    outputs = calloc(output_count ? output_count : 1, sizeof *outputs);
    if (!outputs) {
        fprintf(stderr, "c_embed: out of memory\n");
        rc = 1;
        goto done;
    }
    if ((status = capsule_session_run(session, input_names, (const capsule_tensor_t* const*)inputs, input_count,
                                      NULL, outputs, output_count))) {
        rc = report_failure("running", status);
        goto done;
    }
    for (i = 0; i < output_count; ++i) {
        const char* name;
        capsule_dtype dtype;
        size_t rank;
        const int64_t* shape;
        int64_t count, k;
        const void* data;
        if ((status = capsule_model_get_output(model, i, &name, NULL, NULL, NULL)) ||
            (status = capsule_tensor_get_info(outputs[i], &dtype, &rank, &shape, &count)) ||
            (status = capsule_tensor_get_data(outputs[i], &data, NULL))) {
            rc = report_failure("reading an output", status);
            goto done;
        }
        printf("output %s %s ", name, capsule_dtype_name(dtype));
        print_shape(rank, shape);
        printf(":");
        for (k = 0; k < count && k < 8; ++k) printf(" %.6f", element(dtype, data, k));
        printf(count > 8 ? " ...\n" : "\n");
    }

done:
    for (i = 0; outputs && i < output_count; ++i) capsule_tensor_release(outputs[i]);
    for (i = 0; inputs && i < input_count; ++i) capsule_tensor_release(inputs[i]);
    free(outputs);
    free(inputs);
    free((void*)input_names);
    capsule_session_release(session);
    capsule_plan_release(plan);
    capsule_model_release(model);
    capsule_profile_release(profile);
    capsule_host_release(host);
    return rc;
}
