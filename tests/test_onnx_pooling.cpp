// ONNX MaxPool / AveragePool windows imported as strided slices (core/src/onnx/pooling.cpp): 3-D
// and 1-D windows, dilations, asymmetric padding with and without count_include_pad, ceil_mode,
// each compared with a brute-force evaluation of the pooling definition, and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <onnx/onnx_pb.h>

#include "capsule/onnx_import.hpp"
#include "capsule/session.hpp"
#include "capsule_fixtures.hpp"

using namespace capsule;
using capsule::testing::built_host;

namespace {

struct Pool {
    bool is_max = true;
    Shape in;  // [N, C, spatial...]
    std::vector<std::int64_t> kernel, stride, dilation, pads;  // pads: begins then ends
    bool ceil_mode = false, count_include_pad = false;

    std::size_t sp() const { return kernel.size(); }
    std::int64_t pad_begin(std::size_t a) const { return pads.empty() ? 0 : pads[a]; }
    std::int64_t pad_end(std::size_t a) const { return pads.empty() ? 0 : pads[sp() + a]; }
    std::int64_t step(std::size_t a) const { return stride.empty() ? 1 : stride[a]; }
    std::int64_t dil(std::size_t a) const { return dilation.empty() ? 1 : dilation[a]; }

    /// Output length (ONNX: floor, or ceil with ceil_mode, of (in + pads − dilated kernel) / stride + 1;
    /// a ceil-mode window starting past the input and its left padding is dropped, as PyTorch).
    std::int64_t out_length(std::size_t a) const {
        const auto in_len = in[a + 2], extent = (kernel[a] - 1) * dil(a) + 1;
        const double exact = double(in_len + pad_begin(a) + pad_end(a) - extent) / double(step(a)) + 1;
        auto o = static_cast<std::int64_t>(ceil_mode ? std::ceil(exact) : std::floor(exact));
        if (ceil_mode && (o - 1) * step(a) >= in_len + pad_begin(a)) --o;
        return o;
    }
    Shape out_shape() const {
        Shape s{in[0], in[1]};
        for (std::size_t a = 0; a < sp(); ++a) s.push_back(out_length(a));
        return s;
    }

    onnx::ModelProto proto() const {
        onnx::ModelProto m;
        m.set_ir_version(7);
        auto* imp = m.add_opset_import();
        imp->set_domain("");
        imp->set_version(12);
        auto* g = m.mutable_graph();
        g->set_name("g");
        auto typed = [](onnx::ValueInfoProto* v, const std::string& name, const Shape& dims, bool named) {
            v->set_name(name);
            v->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
            for (std::size_t a = 0; a < dims.size(); ++a) {
                auto* dim = v->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim();
                if (named) dim->set_dim_param("d" + std::to_string(a));
                else dim->set_dim_value(dims[a]);
            }
        };
        typed(g->add_input(), "x", in, false);
        // The output's dimensions are left named (the importer compares its shape with ONNX's
        // inference, which keeps a ceil-mode MaxPool window starting in the right padding).
        typed(g->add_output(), "y", in, true);
        auto* n = g->add_node();
        n->set_op_type(is_max ? "MaxPool" : "AveragePool");
        n->set_name("pool");
        n->add_input("x");
        n->add_output("y");
        auto ints = [&](const std::string& name, const std::vector<std::int64_t>& v) {
            if (v.empty()) return;
            auto* a = n->add_attribute();
            a->set_name(name);
            a->set_type(onnx::AttributeProto::INTS);
            for (auto e : v) a->add_ints(e);
        };
        auto flag = [&](const std::string& name, bool v) {
            auto* a = n->add_attribute();
            a->set_name(name);
            a->set_type(onnx::AttributeProto::INT);
            a->set_i(v);
        };
        ints("kernel_shape", kernel);
        ints("strides", stride);
        ints("dilations", dilation);
        ints("pads", pads);
        flag("ceil_mode", ceil_mode);
        if (!is_max) flag("count_include_pad", count_include_pad);
        return m;
    }

    /// The definition, position by position: max over the window's input positions (padding is
    /// −∞), or their sum over the count of input positions (count_include_pad: positions within
    /// the input and its declared pads).
    std::vector<double> brute_force(const std::vector<double>& x) const {
        const Shape out = out_shape();
        std::vector<double> y;
        const std::int64_t planes = in[0] * in[1];
        std::int64_t plane_size = 1, out_size = 1, window = 1;
        for (std::size_t a = 0; a < sp(); ++a) {
            plane_size *= in[a + 2];
            out_size *= out[a + 2];
            window *= kernel[a];
        }
        for (std::int64_t p = 0; p < planes; ++p)
            for (std::int64_t o = 0; o < out_size; ++o) {
                double best = -std::numeric_limits<double>::infinity(), sum = 0, counted = 0;
                for (std::int64_t t = 0; t < window; ++t) {
                    std::int64_t offset = 0, orest = o, trest = t;
                    bool inside = true, in_pads = true;
                    std::vector<std::int64_t> pos(sp());
                    for (std::size_t a = sp(); a-- > 0;) {
                        const auto oa = orest % out[a + 2], ta = trest % kernel[a];
                        orest /= out[a + 2];
                        trest /= kernel[a];
                        pos[a] = oa * step(a) + ta * dil(a) - pad_begin(a);
                        inside = inside && pos[a] >= 0 && pos[a] < in[a + 2];
                        in_pads = in_pads && pos[a] >= -pad_begin(a) && pos[a] < in[a + 2] + pad_end(a);
                    }
                    for (std::size_t a = 0; a < sp(); ++a) offset = offset * in[a + 2] + pos[a];
                    if (inside) {
                        const double v = x[static_cast<std::size_t>(p * plane_size + offset)];
                        best = std::max(best, v);
                        sum += v;
                    }
                    counted += count_include_pad ? in_pads : inside;
                }
                y.push_back(is_max ? best : sum / counted);
            }
        return y;
    }
};

std::vector<double> run(const Pool& pool, const std::vector<double>& x) {
    const auto model = import_onnx_bytes(pool.proto().SerializeAsString(), "pool.onnx", {});
    const auto& profile = find_builtin_profile("checked_cpu");
    auto accepted = profile.accept_graph(built_host(), model.graph);
    EXPECT_TRUE(accepted.accepted.has_value());
    ParameterMap params = model.parameters;
    auto inputs = bind_onnx_inputs(model, {{"x", Tensor::from_values(DType::float32, pool.in, x)}}, params);
    auto session = Session::create(profile, *accepted.accepted, model.graph, built_host(), params);
    auto out = session.run(inputs);
    EXPECT_EQ(out.size(), 1u);
    EXPECT_EQ(out.at(0).shape(), pool.out_shape());
    return out.at(0).to_doubles();
}

std::vector<double> values(const Shape& shape) {
    std::int64_t count = 1;
    for (auto d : shape) count *= d;
    std::vector<double> v;
    for (std::int64_t i = 0; i < count; ++i) v.push_back(static_cast<double>(static_cast<float>(std::sin(1.7 * double(i)) * 4)));
    return v;
}

}  // namespace

TEST(OnnxPooling, SlicedWindowsMatchTheDefinition) {
    std::vector<std::pair<std::string, Pool>> cases;
    Pool p;
    p.in = {2, 2, 5, 6, 7};
    p.kernel = {2, 3, 2};
    cases.emplace_back("3-D max", p);
    p.stride = {2, 1, 3};
    p.dilation = {1, 2, 2};
    p.pads = {1, 0, 1, 0, 2, 1};
    cases.emplace_back("3-D max, strides, dilations, asymmetric pads", p);
    p.ceil_mode = true;
    cases.emplace_back("3-D max, ceil_mode", p);
    p.is_max = false;
    p.dilation.clear();
    // Along the last axis ceil_mode adds a window, none starting in the right padding (ONNX
    // 1.12's shape inference of AveragePool would keep such a window, which PyTorch drops).
    p.kernel = {2, 3, 3};
    p.stride = {2, 1, 2};
    p.pads = {1, 0, 1, 0, 2, 0};
    cases.emplace_back("3-D average, ceil_mode, pads not counted", p);
    p.count_include_pad = true;
    cases.emplace_back("3-D average, ceil_mode, pads counted", p);
    Pool q;
    q.in = {1, 3, 9, 8};
    q.kernel = {3, 2};
    q.stride = {2, 3};
    q.dilation = {3, 2};
    q.pads = {2, 0, 0, 1};
    cases.emplace_back("2-D dilated max", q);
    q.is_max = false;
    q.dilation.clear();
    cases.emplace_back("2-D average over asymmetric pads, not counted", q);
    q.ceil_mode = true;
    q.count_include_pad = true;
    q.stride = {3, 3};
    q.pads = {2, 0, 0, 0};
    cases.emplace_back("2-D average over asymmetric pads, counted, ceil_mode", q);
    Pool r;
    r.in = {2, 1, 11};
    r.kernel = {3};
    r.dilation = {4};
    r.pads = {1, 3};
    cases.emplace_back("1-D dilated max", r);
    for (const auto& [what, pool] : cases) {
        SCOPED_TRACE(what);
        const auto x = values(pool.in);
        const auto got = run(pool, x), expected = pool.brute_force(x);
        ASSERT_EQ(got.size(), expected.size());
        for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 2e-6) << i;
    }
}

TEST(OnnxPooling, WindowsOverPaddingAloneOrTooLongAreRefused) {
    Pool p;
    p.in = {1, 1, 4, 4, 4};
    p.kernel = {2, 2, 2};
    p.pads = {3, 0, 0, 0, 0, 0};  // the first window along axis 2 covers rows −3 and −2 only
    try {
        import_onnx_bytes(p.proto().SerializeAsString(), "pool.onnx", {});
        ADD_FAILURE() << "imported";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("a window covers only padding"), std::string::npos) << e.what();
    }
    Pool q;
    q.in = {1, 1, 9000, 2, 2};
    q.kernel = {5000, 1, 1};
    try {
        import_onnx_bytes(q.proto().SerializeAsString(), "pool.onnx", {});
        ADD_FAILURE() << "imported";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("a window more than 4096 positions long"), std::string::npos) << e.what();
    }
}
