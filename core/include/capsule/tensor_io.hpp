// Tensor files: NumPy .npy (format 1.0–3.0, C order) and safetensors (parameters), read and
// written with strict validation. Every error names the file and the problem.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "capsule/tensor.hpp"

namespace capsule {

/// Reads a .npy file. Supported dtypes: `<f4` float32, `<f8` float64, `<f2` float16, `<i8` int64,
/// `<i4` int32, `<i2` int16, `|i1` int8, `<u8` uint64, `<u4` uint32, `<u2` uint16, `|u1` uint8,
/// `|b1` bool (little-endian, C order). Raises Error(input) for a missing file, bad magic, truncated data,
/// Fortran order, or another dtype (naming it and the supported ones).
Tensor read_npy(const std::filesystem::path& path);
/// Writes a host tensor as .npy format 1.0. Raises Error(input) for a bfloat16 tensor (numpy has
/// no such type), Error when the file cannot be written.
void write_npy(const std::filesystem::path& path, const Tensor& tensor);

/// Reads every tensor of a safetensors file (https://github.com/huggingface/safetensors: u64
/// little-endian header size, JSON header of {name: {dtype, shape, data_offsets}}, then data).
/// Supported dtypes F32, F64, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL. Raises Error(input) for a malformed header, offsets out of
/// range or inconsistent with shape, overlapping tensors, or another dtype.
std::map<std::string, Tensor> read_safetensors(const std::filesystem::path& path);
/// Writes host tensors as a safetensors file (tensors in name order, 8-byte aligned header).
void write_safetensors(const std::filesystem::path& path,
                       const std::map<std::string, Tensor>& tensors);

}  // namespace capsule
