// capsule_ops_doc: writes docs/ops.md from docs/ops.template.md and the op catalog
// (capsule/backend_ops.def), or checks that it is current.
//
//   capsule_ops_doc TEMPLATE OUTPUT           write OUTPUT
//   capsule_ops_doc --check TEMPLATE OUTPUT   exit 1 when OUTPUT differs from what would be written
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "capsule/op_catalog.hpp"

namespace {
std::string read(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
        throw capsule::Error(capsule::ErrorCode::input, path + ": not a regular file");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw capsule::Error(capsule::ErrorCode::input, path + ": cannot be read");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}
}  // namespace

int main(int argc, char** argv) {
    const bool check = argc == 4 && std::string(argv[1]) == "--check";
    if (argc != 3 && !check) {
        std::cerr << "usage: capsule_ops_doc [--check] TEMPLATE OUTPUT\n";
        return 2;
    }
    const std::string template_path = argv[argc - 2], output_path = argv[argc - 1];
    try {
        const std::string page = capsule::render_ops_markdown(read(template_path));
        if (check) {
            if (read(output_path) == page) return 0;
            std::cerr << output_path << " is not what " << template_path
                      << " and the op catalog give; regenerate it: capsule_ops_doc " << template_path << " "
                      << output_path << "\n";
            return 1;
        }
        // Through a temporary file and a rename: a failed write never leaves a stale page behind.
        const std::string temp = output_path + ".tmp";
        {
            std::ofstream out(temp, std::ios::binary | std::ios::trunc);
            out << page;
            out.flush();
            if (!out) {
                std::remove(temp.c_str());
                throw capsule::Error(capsule::ErrorCode::input, output_path + ": cannot be written (through " + temp + ")");
            }
        }
        if (std::rename(temp.c_str(), output_path.c_str()) != 0) {
            std::remove(temp.c_str());
            throw capsule::Error(capsule::ErrorCode::input, output_path + ": cannot be written");
        }
        return 0;
    } catch (const capsule::Error& e) {
        std::cerr << "capsule_ops_doc: " << e.what() << "\n";
        return 2;
    }
}
