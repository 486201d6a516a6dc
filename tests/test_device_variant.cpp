// The shared device runtime (runtime/device_variant.h) on a device API over host memory: a
// test variant whose recorded work is the CPU executor reading the device's leaf buffers and
// writing its arena. Checks the run protocol without a GPU: what crosses the host-device
// boundary per run (device_stats), carried state moved on the device (double-buffered where a
// carried value sits in another carried input's buffer), params per generation, the error flag.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "backends/cpu/executor.h"
#include "rlx/rlx.h"
#include "runtime/device_variant.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;

// Buffers in host memory; every copy happens at once (so in call order).
class HostDevice final : public DeviceApi {
 public:
  DeviceBuf allocate(size_t bytes, const std::string&) override {
    bufs_.emplace_back(bytes);
    return DeviceBuf{static_cast<uint32_t>(bufs_.size())};
  }
  void release(DeviceBuf b) override { bufs_.at(b.id - 1) = {}; }
  int error_flag() const override { return flag_; }
  void mark_start() override {}
  void mark_stop() override {}
  double elapsed_ms() override { return 0.25; }
  void wait() override {}
  uint8_t* address(DeviceBuf b) { return bufs_.at(b.id - 1).data(); }

 protected:
  void do_upload(std::span<const HostToDevice> copies, bool) override {
    for (const auto& c : copies) std::memcpy(address(c.dst) + c.offset, c.src, c.bytes);
  }
  void do_download(std::span<const DeviceToHost> copies) override {
    for (const auto& c : copies) std::memcpy(c.dst, address(c.src) + c.offset, c.bytes);
  }
  void do_copy(std::span<const DeviceToDevice> copies) override {
    for (const auto& c : copies) {
      uint8_t* d = address(c.dst) + c.dst_offset;
      const uint8_t* s = address(c.src) + c.src_offset;
      EXPECT_TRUE(d + c.bytes <= s || s + c.bytes <= d) << "overlapping device copy";
      std::memcpy(d, s, c.bytes);
    }
  }
  void do_read_error_flag(DeviceBuf flag) override { std::memcpy(&flag_, address(flag), sizeof flag_); }

 private:
  std::vector<std::vector<uint8_t>> bufs_;
  int flag_ = 0;
};

class HostVariant final : public DeviceVariant {
 public:
  explicit HostVariant(const Graph& g) : DeviceVariant(g, std::make_unique<HostDevice>()), ex_(g) {
    EXPECT_EQ(ex_.arena_bytes(), arena_bytes());  // one plan, so one arena layout
  }
  int fail_code = 0;  // written to the error flag by the next submit
  int submits = 0;

 private:
  HostDevice& host() { return static_cast<HostDevice&>(dev()); }
  void submit() override {
    ++submits;
    std::unordered_map<NodeId, Tensor> leaves;
    for (const Node& n : graph().nodes())
      if (std::holds_alternative<ops::Input>(n.op) || std::holds_alternative<ops::Param>(n.op))
        leaves[n.id] = Tensor::borrow(n.outputs[0].dtype, n.outputs[0].concrete(), host().address(leaf_buf(n.id)));
    ex_.run(leaves, {});
    if (arena_bytes()) std::memcpy(host().address(arena_buf()), ex_.arena(), arena_bytes());
    std::memcpy(host().address(flag_buf()), &fail_code, sizeof fail_code);
  }
  std::string kernel_error_message(int code) const override { return "test kernel error " + std::to_string(code); }

  cpu::Executor ex_;
};

NodeId input_id(const Graph& g, const std::string& name) {
  for (NodeId id : g.input_nodes())
    if (std::get<ops::Input>(g.node(id).op).name == name) return id;
  throw Error("no input " + name);
}

struct Delta {
  DeviceStats before = device_stats();
  DeviceStats now() const {
    DeviceStats a = device_stats(), d;
    d.uploads = a.uploads - before.uploads;
    d.upload_bytes = a.upload_bytes - before.upload_bytes;
    d.downloads = a.downloads - before.downloads;
    d.download_bytes = a.download_bytes - before.download_bytes;
    d.device_copies = a.device_copies - before.device_copies;
    d.device_copy_bytes = a.device_copy_bytes - before.device_copy_bytes;
    d.flag_reads = a.flag_reads - before.flag_reads;
    d.param_uploads = a.param_uploads - before.param_uploads;
    return d;
  }
};

TEST(DeviceVariant, CarriedStateStaysOnTheDevice) {
  // h_next = h * w + x (w a param), out 1 = sum(h_next): a tiny recurrent step.
  Graph g;
  const Value h = g.input("h", Shape::of({64}));
  const Value x = g.input("x", Shape::of({64}));
  const Value w = g.param("w", Shape::of({64}));
  const Value next = g.add(g.mul(h, w), x);
  g.add_output(next);
  g.add_output(g.sum(next, {0}));
  HostVariant v(g);
  const NodeId hid = input_id(g, "h"), xid = input_id(g, "x"), wid = g.param_nodes().at(0);
  const Tensor x1 = Tensor::f32({64}, std::vector<float>(64, 1.0f));
  const Tensor w1 = Tensor::f32({64}, std::vector<float>(64, 0.5f));
  const std::vector<size_t> keep = {0}, sum_only = {1}, none = {};
  const std::vector<Carry> carry = {{hid, 0}};

  Delta first;
  std::unordered_map<NodeId, Tensor> leaves = {{hid, Tensor::f32({64}, std::vector<float>(64, 4.0f))}, {xid, x1}, {wid, w1}};
  auto r = v.run(RunArgs{leaves, sum_only, nullptr, 7, {}, keep});
  float hv = 4.0f * 0.5f + 1.0f;
  EXPECT_FLOAT_EQ(r.at(0).to_f32()[0], 64 * hv);
  DeviceStats d = first.now();
  EXPECT_EQ(d.param_uploads, 1u);
  EXPECT_EQ(d.uploads, 3u);  // w, h, x
  EXPECT_EQ(d.downloads, 1u);
  EXPECT_EQ(d.download_bytes, 4u);
  EXPECT_EQ(d.device_copies, 0u);
  EXPECT_EQ(d.flag_reads, 1u);

  // Ten more steps carrying h: only x goes up and the sum comes back.
  std::unordered_map<NodeId, Tensor> step = {{xid, x1}, {wid, w1}};
  Delta loop;
  for (int i = 0; i < 10; ++i) {
    hv = hv * 0.5f + 1.0f;
    r = v.run(RunArgs{step, sum_only, nullptr, 7, carry, keep});
    EXPECT_FLOAT_EQ(r.at(0).to_f32()[0], 64 * hv) << i;
  }
  d = loop.now();
  EXPECT_EQ(d.param_uploads, 0u);
  EXPECT_EQ(d.uploads, 10u);
  EXPECT_EQ(d.upload_bytes, 10u * 64 * 4);  // x only: h never goes through the host
  EXPECT_EQ(d.downloads, 10u);
  EXPECT_EQ(d.download_bytes, 10u * 4);     // the sum only
  EXPECT_EQ(d.device_copies, 10u);
  EXPECT_EQ(d.device_copy_bytes, 10u * 64 * 4);

  // The carried value leaves the device only when asked for.
  Delta fetch;
  const Tensor kept = v.kept_outputs({0}, false).at(0);
  EXPECT_EQ(fetch.now().download_bytes, 64u * 4);
  EXPECT_FLOAT_EQ(kept.to_f32()[5], hv);
  EXPECT_THAT(testing::error_message([&] { v.kept_outputs({1}, false); }), HasSubstr("was not kept"));

  // A new params generation is uploaded once.
  Delta gen;
  v.run(RunArgs{step, none, nullptr, 8, carry, keep});
  v.run(RunArgs{step, none, nullptr, 8, carry, keep});
  EXPECT_EQ(gen.now().param_uploads, 1u);
}

TEST(DeviceVariant, CarriedValuesThatTradePlacesAreDoubleBuffered) {
  // a_next = b (the input itself), b_next = a + 1: a's carried value sits in b's buffer, which
  // b's own carry overwrites.
  Graph g;
  const Value a = g.input("a", Shape::of({4}));
  const Value b = g.input("b", Shape::of({4}));
  g.add_output(b);
  g.add_output(g.add(a, g.scalar(1.0)));
  HostVariant v(g);
  const NodeId aid = input_id(g, "a"), bid = input_id(g, "b");
  const std::vector<size_t> keep = {0, 1}, all = {0, 1};
  std::unordered_map<NodeId, Tensor> leaves = {{aid, Tensor::f32({4}, std::vector<float>(4, 10.0f))},
                                               {bid, Tensor::f32({4}, std::vector<float>(4, 20.0f))}};
  auto r = v.run(RunArgs{leaves, all, nullptr, 0, {}, keep});
  EXPECT_EQ(r[0].to_f32()[0], 20.0f);
  EXPECT_EQ(r[1].to_f32()[0], 11.0f);
  const std::vector<Carry> carry = {{aid, 0}, {bid, 1}};
  const std::unordered_map<NodeId, Tensor> none;
  float ea = 20.0f, eb = 11.0f;
  for (int i = 0; i < 4; ++i) {
    Delta d;
    r = v.run(RunArgs{none, all, nullptr, 0, carry, keep});
    const float na = eb, nb = ea + 1.0f;
    ea = na, eb = nb;
    EXPECT_EQ(r[0].to_f32()[0], ea) << i;
    EXPECT_EQ(r[1].to_f32()[0], eb) << i;
    EXPECT_EQ(d.now().uploads, 0u);
    EXPECT_EQ(d.now().device_copies, 3u);  // a through its double buffer (2), b straight in (1)
  }
}

TEST(DeviceVariant, AnInputPassedThroughIsNotCopied) {
  Graph g;
  const Value a = g.input("a", Shape::of({4}));
  const Value x = g.input("x", Shape::of({4}));
  g.add_output(a);
  g.add_output(g.add(a, x));
  HostVariant v(g);
  const NodeId aid = input_id(g, "a"), xid = input_id(g, "x");
  const std::vector<size_t> keep = {0}, out = {1};
  const Tensor ones = Tensor::f32({4}, std::vector<float>(4, 1.0f));
  std::unordered_map<NodeId, Tensor> leaves = {{aid, Tensor::f32({4}, std::vector<float>(4, 5.0f))}, {xid, ones}};
  v.run(RunArgs{leaves, out, nullptr, 0, {}, keep});
  Delta d;
  const std::vector<Carry> carry = {{aid, 0}};
  std::unordered_map<NodeId, Tensor> step = {{xid, ones}};
  auto r = v.run(RunArgs{step, out, nullptr, 0, carry, keep});
  EXPECT_EQ(r[0].to_f32()[0], 6.0f);
  EXPECT_EQ(d.now().device_copies, 0u);
}

TEST(DeviceVariant, ErrorFlagThrowsAndDropsWhatWasKept) {
  Graph g;
  const Value a = g.input("a", Shape::of({4}));
  g.add_output(g.add(a, a));
  HostVariant v(g);
  const NodeId aid = input_id(g, "a");
  const std::vector<size_t> keep = {0}, none = {};
  std::unordered_map<NodeId, Tensor> leaves = {{aid, Tensor::f32({4}, std::vector<float>(4, 1.0f))}};
  v.run(RunArgs{leaves, none, nullptr, 0, {}, keep});
  v.fail_code = 7;
  const std::vector<Carry> carry = {{aid, 0}};
  const std::unordered_map<NodeId, Tensor> empty;
  EXPECT_THAT(testing::error_message([&] { v.run(RunArgs{empty, none, nullptr, 0, carry, keep}); }),
              HasSubstr("test kernel error 7"));
  v.fail_code = 0;
  const int submits = v.submits;
  EXPECT_THAT(testing::error_message([&] { v.run(RunArgs{empty, none, nullptr, 0, carry, keep}); }),
              HasSubstr("did not keep"));
  EXPECT_EQ(v.submits, submits);  // rejected before anything ran
  // A wrong-sized input is rejected before anything is enqueued.
  std::unordered_map<NodeId, Tensor> bad = {{aid, Tensor::f32({2}, std::vector<float>(2, 1.0f))}};
  EXPECT_THAT(testing::error_message([&] { v.run(RunArgs{bad, none, nullptr, 0}); }), HasSubstr("got 8 bytes, expected 16"));
  EXPECT_EQ(v.submits, submits);
}

}  // namespace
}  // namespace rlx
