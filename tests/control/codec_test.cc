// The wire format: round trips of every message type, and rejection (never a crash) of
// malformed, oversized and newer-version input.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "control/wire/codec.h"
#include "control/wire/messages.h"

namespace rtft::control {
namespace {

using json = nlohmann::json;

Message RoundTrip(MsgType type, const json& body) {
  auto bytes = EncodeMessage(type, body);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  if (!bytes.ok()) return Message{type, json()};
  EXPECT_EQ(bytes->substr(0, 4), "RTFC");
  EXPECT_EQ(static_cast<uint8_t>((*bytes)[4]), kProtocolVersion);
  auto msg = DecodeMessage(bytes->data(), bytes->size());
  EXPECT_TRUE(msg.ok()) << msg.status();
  if (!msg.ok()) return Message{type, json()};
  EXPECT_EQ(msg->type, type);
  EXPECT_EQ(msg->body, body);
  return *msg;
}

ControlEvent SampleEvent() {
  ControlEvent e;
  e.type = ControlEvent::Type::kEpochChange;
  e.membership.epoch = 5;
  e.membership.world_size = 3;
  e.membership.rank_to_slot = {0, 4, 2};
  e.membership.spares = {3};
  e.membership.retired = {1};
  e.membership.slot_roles = {Role::kActive, Role::kRetired, Role::kRestarted, Role::kSpare,
                             Role::kActivated};
  e.failed_ranks = {1};
  e.reason = "slot 1 lost";
  e.exit_code = -3;
  return e;
}

std::string Encoded(MsgType type, const json& body) { return *EncodeMessage(type, body); }

std::string Decode(const std::string& bytes) {
  auto m = DecodeMessage(bytes.data(), bytes.size());
  return m.ok() ? "OK" : m.status().message();
}

TEST(Codec, EveryMessageTypeRoundTrips) {
  RoundTrip(MsgType::kHello, HelloBody({7, "node-a", 1234}));
  RoundTrip(MsgType::kHeartbeat, HeartbeatBody(7, uint64_t{1} << 40, 99));
  RoundTrip(MsgType::kFailure, FailureBody(3, 7, FailureKind::kHang, 2, -9));
  RoundTrip(MsgType::kExit, ExitBody(4, 7, 137));
  RoundTrip(MsgType::kKvPut, KvPutBody(5, "k", std::string("\0\1\2", 3)));
  RoundTrip(MsgType::kKvGet, KvGetBody(6, "k", 1000));
  RoundTrip(MsgType::kAck, AckBody(7, Status::NotFound("x")));
  RoundTrip(MsgType::kKvValue, KvValueBody(8, std::string("v")));
  RoundTrip(MsgType::kKvValue, KvValueBody(8, Status::DeadlineExceeded("late")));
  RoundTrip(MsgType::kHeartbeatAck, json{{"epoch", 3}});
  RoundTrip(MsgType::kAttach, AttachBody(42));
  RoundTrip(MsgType::kAssign, AssignBody({Role::kActivated, 2, 9, 4}));
  RuntimeReport r;
  r.type = RuntimeReport::Type::kKvGet;
  r.key = "nccl/1";
  r.timeout_ms = 50;
  RoundTrip(MsgType::kReport, ReportBody(r));
  RoundTrip(MsgType::kLocalKvReply, LocalKvReplyBody("k", std::string("v")));
  // The hang detector's progress sample: in the runtime's report and in the heartbeat.
  RuntimeReport sample;
  sample.type = RuntimeReport::Type::kSample;
  sample.progress.calls = uint64_t{1} << 50;
  sample.progress.in_call = true;
  sample.progress.peer = 3;
  sample.progress.long_phase = true;
  RoundTrip(MsgType::kReport, ReportBody(sample));
  CallProgress p = sample.progress;
  p.age_ms = 250;
  RoundTrip(MsgType::kHeartbeat, HeartbeatBody(7, 12, 99, true, p));
  Message ev = RoundTrip(MsgType::kEvent, EventBody(SampleEvent()));
  ControlEvent back = EventFrom(ev.body, 4);
  EXPECT_EQ(back.membership.rank_to_slot, SampleEvent().membership.rank_to_slot);
  EXPECT_EQ(back.membership.slot_roles, SampleEvent().membership.slot_roles);
  EXPECT_EQ(back.exit_code, -3);
  EXPECT_EQ(back.assignment.rank, 1);  // slot 4 holds rank 1
  EXPECT_EQ(back.assignment.role, Role::kActivated);
  EXPECT_EQ(EventFrom(ev.body, 3).assignment.rank, kNoRank);

  ControlEvent local = SampleEvent();
  local.assignment = {Role::kRestarted, 2, 5, 3};
  Message lev = RoundTrip(MsgType::kLocalEvent, LocalEventBody(local));
  EXPECT_EQ(LocalEventFrom(lev.body).assignment.role, Role::kRestarted);
}

TEST(Codec, RejectsBadHeaders) {
  const std::string good = Encoded(MsgType::kAttach, AttachBody(1));
  EXPECT_EQ(Decode(good), "OK");
  EXPECT_NE(Decode(good.substr(0, 11)).find("shorter than the header"), std::string::npos);
  EXPECT_NE(Decode(""), "OK");
  std::string bad = good;
  bad[0] = 'X';
  EXPECT_NE(Decode(bad).find("bad magic"), std::string::npos);
  bad = good;
  bad[4] = kProtocolVersion + 1;
  EXPECT_NE(Decode(bad).find("newer than this build"), std::string::npos);
  bad[4] = 0;
  EXPECT_NE(Decode(bad).find("not supported"), std::string::npos);
  bad = good;
  bad[5] = 99;
  EXPECT_NE(Decode(bad).find("unknown message type"), std::string::npos);
  bad = good;
  bad[6] = 1;
  EXPECT_NE(Decode(bad).find("reserved"), std::string::npos);
  EXPECT_NE(Decode(good + "x").find("header says"), std::string::npos);
  EXPECT_NE(Decode(good.substr(0, good.size() - 1)).find("header says"), std::string::npos);
}

TEST(Codec, RejectsOversizedMessages) {
  std::string huge(kMaxMessageBytes + 1, '\0');
  std::memcpy(huge.data(), kMagic, 4);
  huge[4] = kProtocolVersion;
  EXPECT_NE(Decode(huge).find("exceeds the limit"), std::string::npos);
  // The encoder refuses a value beyond the field limit before it reaches the wire.
  auto too_big =
      EncodeMessage(MsgType::kKvPut, KvPutBody(1, "k", std::string(kMaxValueBytes + 1, 'v')));
  EXPECT_EQ(too_big.status().code(), StatusCode::kInvalidArgument);
}

// Frames an arbitrary MessagePack body under a valid header.
std::string Frame(MsgType type, const std::vector<uint8_t>& body) {
  std::string out(kHeaderBytes, '\0');
  std::memcpy(out.data(), kMagic, 4);
  out[4] = kProtocolVersion;
  out[5] = static_cast<char>(type);
  const uint32_t n = body.size();
  for (int i = 0; i < 4; ++i) out[8 + i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.append(body.begin(), body.end());
  return out;
}
std::string FrameJson(MsgType type, const json& body) {
  return Frame(type, json::to_msgpack(body));
}

TEST(Codec, RejectsFieldsOfTheWrongTypeRangeOrSize) {
  auto hb = [](json slot, json step) { return json{{"slot", slot}, {"step", step}, {"seq", 0}}; };
  EXPECT_EQ(Decode(FrameJson(MsgType::kHeartbeat, hb(1, 2))), "OK");
  EXPECT_NE(Decode(FrameJson(MsgType::kHeartbeat, hb("1", 2))).find("field 'slot'"),
            std::string::npos);
  EXPECT_NE(Decode(FrameJson(MsgType::kHeartbeat, hb(-1, 2))).find("field 'slot'"),
            std::string::npos);
  EXPECT_NE(Decode(FrameJson(MsgType::kHeartbeat, hb(kMaxSlots, 2))).find("field 'slot'"),
            std::string::npos);
  EXPECT_NE(Decode(FrameJson(MsgType::kHeartbeat, hb(1, 2.5))).find("field 'step'"),
            std::string::npos);
  EXPECT_NE(Decode(FrameJson(MsgType::kHeartbeat, hb(1, UINT64_MAX))).find("field 'step'"),
            std::string::npos);
  EXPECT_NE(Decode(FrameJson(MsgType::kHeartbeat, json{{"slot", 1}, {"step", 1}}))
                .find("missing field 'seq'"),
            std::string::npos);
  json extra = hb(1, 2);
  extra["evil"] = 1;
  EXPECT_NE(Decode(FrameJson(MsgType::kHeartbeat, extra)).find("unknown field"), std::string::npos);
  EXPECT_NE(Decode(FrameJson(MsgType::kHeartbeat, json::array({1, 2, 3}))).find("not a map"),
            std::string::npos);
  // Strings and byte strings: type and length.
  EXPECT_NE(Decode(FrameJson(MsgType::kHello,
                             json{{"slot", 0}, {"host", std::string(300, 'h')}, {"pid", 1}}))
                .find("field 'host'"),
            std::string::npos);
  EXPECT_NE(Decode(FrameJson(MsgType::kKvPut, json{{"req", 1}, {"key", "k"}, {"value", "text"}}))
                .find("not a byte string"),
            std::string::npos);
  EXPECT_NE(Decode(FrameJson(MsgType::kKvPut,
                             json{{"req", 1},
                                  {"key", "k"},
                                  {"value", json::binary({1, 2}, 7)}}))  // msgpack ext type
                .find("not a byte string"),
            std::string::npos);
  // Events: list elements, and lists that disagree with each other.
  json ev = EventBody(SampleEvent());
  ev["r2s"] = json::array({0, "x", 2});
  EXPECT_NE(Decode(FrameJson(MsgType::kEvent, ev)).find("field 'r2s'"), std::string::npos);
  ev = EventBody(SampleEvent());
  ev["ws"] = 7;
  EXPECT_NE(Decode(FrameJson(MsgType::kEvent, ev)).find("'ws' differs"), std::string::npos);
  ev = EventBody(SampleEvent());
  ev["spares"] = json::array({40});
  EXPECT_NE(Decode(FrameJson(MsgType::kEvent, ev)).find("beyond 'roles'"), std::string::npos);
}

// The GPU fields (docs/control-protocol.md): the hello's device among its node's GPUs, an
// event's device per rank, the local link's device of the rank; all optional, all checked.
TEST(Codec, DevicesTravelWithTheRankAndAreChecked) {
  AgentInfo me{7, "node-a", 1234, "", 1, 2};
  Message hello = RoundTrip(MsgType::kHello, HelloBody(me));
  EXPECT_EQ(hello.body["dev"], 1);
  EXPECT_EQ(hello.body["gpus"], 2);
  EXPECT_FALSE(HelloBody({7, "node-a", 1234}).contains("dev"));  // no GPU: no fields
  auto with = [&](json dev, json gpus) {
    json b = HelloBody({7, "node-a", 1234});
    if (!dev.is_null()) b["dev"] = dev;
    if (!gpus.is_null()) b["gpus"] = gpus;
    return Decode(FrameJson(MsgType::kHello, b));
  };
  EXPECT_EQ(with(0, 1), "OK");
  EXPECT_EQ(with(1023, 1024), "OK");
  EXPECT_NE(with(2, 2).find("is not one of"), std::string::npos);
  EXPECT_NE(with(-1, 2).find("is not one of"), std::string::npos);
  EXPECT_NE(with(0, 0).find("is not one of"), std::string::npos);
  EXPECT_NE(with(1, json()).find("come together"), std::string::npos);
  EXPECT_NE(with(json(), 4).find("come together"), std::string::npos);
  EXPECT_NE(with(0, 1025).find("field 'gpus'"), std::string::npos);
  EXPECT_NE(with(1024, 1024).find("field 'dev'"), std::string::npos);
  EXPECT_NE(with("0", 1).find("field 'dev'"), std::string::npos);

  ControlEvent e = SampleEvent();
  e.membership.devices = {0, 1, -1};
  Message ev = RoundTrip(MsgType::kEvent, EventBody(e));
  EXPECT_EQ(EventFrom(ev.body, 4).assignment.device, 1);  // slot 4 holds rank 1
  EXPECT_EQ(EventFrom(ev.body, 2).assignment.device, -1);
  EXPECT_EQ(EventFrom(ev.body, 3).assignment.device, -1);  // the spare: none
  EXPECT_EQ(EventFrom(EventBody(SampleEvent()), 4).assignment.device, -1);
  json bad = EventBody(e);
  bad["devs"] = json::array({0, 1});
  EXPECT_NE(Decode(FrameJson(MsgType::kEvent, bad)).find("'devs' differs"), std::string::npos);
  bad["devs"] = json::array({0, 1, 5000});
  EXPECT_NE(Decode(FrameJson(MsgType::kEvent, bad)).find("field 'devs'"), std::string::npos);
  bad["devs"] = json::array({0, 1, -2});
  EXPECT_NE(Decode(FrameJson(MsgType::kEvent, bad)).find("field 'devs'"), std::string::npos);

  Assignment a{Role::kActivated, 2, 9, 4, 3};
  Message assign = RoundTrip(MsgType::kAssign, AssignBody(a));
  EXPECT_EQ(AssignmentFrom(assign.body).device, 3);
  EXPECT_EQ(AssignmentFrom(AssignBody({Role::kActive, 0, 1, 1})).device, -1);
  json hostile = AssignBody(a);
  hostile["dev"] = 1 << 20;
  EXPECT_NE(Decode(FrameJson(MsgType::kAssign, hostile)).find("field 'dev'"), std::string::npos);
}

TEST(Codec, RejectsHostileMessagePack) {
  // Truncated body, trailing garbage, an invalid byte.
  std::vector<uint8_t> body = json::to_msgpack(json{{"pid", 5}});
  EXPECT_EQ(Decode(Frame(MsgType::kAttach, body)), "OK");
  std::vector<uint8_t> truncated(body.begin(), body.end() - 1);
  EXPECT_NE(Decode(Frame(MsgType::kAttach, truncated)), "OK");
  std::vector<uint8_t> trailing = body;
  trailing.push_back(0x00);
  EXPECT_NE(Decode(Frame(MsgType::kAttach, trailing)), "OK");
  EXPECT_NE(Decode(Frame(MsgType::kAttach, {0xc1})), "OK");
  // Deep nesting: 100000 one-element arrays would overflow a recursive parser's stack.
  std::vector<uint8_t> deep(100000, 0x91);
  deep.push_back(0x01);
  EXPECT_NE(Decode(Frame(MsgType::kAttach, deep)).find("nesting deeper"), std::string::npos);
  // A container that claims 2^32-1 elements in a few bytes.
  EXPECT_NE(Decode(Frame(MsgType::kAttach, {0xdd, 0xff, 0xff, 0xff, 0xff})).find("claims"),
            std::string::npos);
  EXPECT_NE(Decode(Frame(MsgType::kAttach, {0xdf, 0xff, 0xff, 0xff, 0xff})).find("claims"),
            std::string::npos);
  // A string that claims more bytes than there are.
  EXPECT_NE(Decode(Frame(MsgType::kAttach, {0x81, 0xdb, 0x7f, 0xff, 0xff, 0xff, 'a'})), "OK");
  // Non-string map keys.
  EXPECT_NE(Decode(Frame(MsgType::kAttach, {0x81, 0x01, 0x02})), "OK");
}

TEST(Codec, AProgressSampleSurvivesTheWireAndComesWholeOrNotAtAll) {
  CallProgress p;
  p.calls = 41;
  p.in_call = true;
  p.peer = 2;
  p.long_phase = false;
  p.age_ms = 120;
  const std::string bytes = Encoded(MsgType::kHeartbeat, HeartbeatBody(1, 5, 6, false, p));
  auto m = DecodeMessage(bytes.data(), bytes.size());
  ASSERT_TRUE(m.ok()) << m.status();
  const CallProgress back = CallProgressFrom(m->body);
  EXPECT_EQ(back.calls, 41u);
  EXPECT_TRUE(back.in_call);
  EXPECT_EQ(back.peer, 2);
  EXPECT_FALSE(back.long_phase);
  EXPECT_EQ(back.age_ms, 120);
  // No sample yet: none of its fields, and the reader says so.
  json none = HeartbeatBody(1, 5, 6);
  EXPECT_FALSE(none.contains("age"));
  EXPECT_FALSE(none.contains("calls"));
  EXPECT_EQ(CallProgressFrom(none).age_ms, -1);
  // Part of a sample, a peer out of range, a negative age: refused.
  json part = HeartbeatBody(1, 5, 6, false, p);
  part.erase("lp");
  EXPECT_NE(Decode(FrameJson(MsgType::kHeartbeat, part)).find("all together"), std::string::npos);
  json far = HeartbeatBody(1, 5, 6, false, p);
  far["peer"] = kMaxSlots;
  EXPECT_NE(Decode(FrameJson(MsgType::kHeartbeat, far)).find("field 'peer'"), std::string::npos);
  json old = HeartbeatBody(1, 5, 6, false, p);
  old["age"] = -5;
  EXPECT_NE(Decode(FrameJson(MsgType::kHeartbeat, old)).find("field 'age'"), std::string::npos);
  // A sample report without its sample.
  EXPECT_NE(Decode(FrameJson(MsgType::kReport,
                             json{{"rt", static_cast<int>(RuntimeReport::Type::kSample)}}))
                .find("without its sample"),
            std::string::npos);
}

TEST(Codec, StepWorkSurvivesTheWireWithItsCount) {
  // The runtime's step report carries the step's own work; the heartbeat the sum and the count.
  RuntimeReport step;
  step.type = RuntimeReport::Type::kProgress;
  step.step = 17;
  step.work_us = 12345;
  Message rep = RoundTrip(MsgType::kReport, ReportBody(step));
  EXPECT_EQ(ReportFrom(rep.body).work_us, 12345);
  step.work_us = -1;  // not measured (the first step): no field
  EXPECT_FALSE(ReportBody(step).contains("work"));
  EXPECT_EQ(ReportFrom(ReportBody(step)).work_us, -1);
  json negative = ReportBody(step);
  negative["work"] = -3;
  EXPECT_NE(Decode(FrameJson(MsgType::kReport, negative)).find("field 'work'"), std::string::npos);

  const StepWork w{uint64_t{1} << 40, 9};
  Message hb = RoundTrip(MsgType::kHeartbeat, HeartbeatBody(2, 30, 4, false, {}, w));
  const StepWork back = StepWorkFrom(hb.body);
  EXPECT_EQ(back.us, uint64_t{1} << 40);
  EXPECT_EQ(back.steps, 9u);
  // None measured since the last heartbeat: neither field.
  json none = HeartbeatBody(2, 30, 4, false, {}, StepWork{500, 0});
  EXPECT_FALSE(none.contains("wus"));
  EXPECT_FALSE(none.contains("wn"));
  EXPECT_EQ(StepWorkFrom(none).steps, 0u);
  // One without the other, or zero steps: refused.
  json half = HeartbeatBody(2, 30, 4, false, {}, w);
  half.erase("wn");
  EXPECT_NE(Decode(FrameJson(MsgType::kHeartbeat, half)).find("'wus'"), std::string::npos);
  json zero = HeartbeatBody(2, 30, 4, false, {}, w);
  zero["wn"] = 0;
  EXPECT_NE(Decode(FrameJson(MsgType::kHeartbeat, zero)).find("field 'wn'"), std::string::npos);
  // A straggler, a failed health check and a corrupt copy are failure kinds of the wire; one
  // past them is not.
  EXPECT_EQ(Decode(Encoded(MsgType::kFailure, FailureBody(1, 2, FailureKind::kStraggler, 1, 0))),
            "OK");
  EXPECT_EQ(Decode(Encoded(MsgType::kFailure, FailureBody(1, 2, FailureKind::kUnhealthy, -1, 0))),
            "OK");
  EXPECT_EQ(Decode(Encoded(MsgType::kFailure, FailureBody(1, 2, FailureKind::kCorrupt, 1, 41))),
            "OK");
  json beyond = FailureBody(1, 2, FailureKind::kCorrupt, 1, 0);
  beyond["kind"] = static_cast<int>(FailureKind::kCorrupt) + 1;
  EXPECT_NE(Decode(FrameJson(MsgType::kFailure, beyond)).find("field 'kind'"), std::string::npos);
}

TEST(Codec, APlannedSwapsPauseSurvivesTheWire) {
  // The coordinator's notice and its local copy.
  for (MsgType type : {MsgType::kPause, MsgType::kLocalPause}) {
    Message m = RoundTrip(type, PauseBody(PauseNotice{7, 1234, false}));
    const PauseNotice back = PauseFrom(m.body);
    EXPECT_EQ(back.epoch, 7u);
    EXPECT_EQ(back.step, 1234u);
    EXPECT_FALSE(back.cancel);
    EXPECT_TRUE(PauseFrom(RoundTrip(type, PauseBody(PauseNotice{7, 1234, true})).body).cancel);
    json partial = PauseBody(PauseNotice{7, 1234, false});
    partial.erase("cancel");
    EXPECT_NE(Decode(FrameJson(type, partial)).find("cancel"), std::string::npos);
  }
  EXPECT_STREQ(MsgTypeName(MsgType::kPause), "pause");
  EXPECT_STREQ(MsgTypeName(MsgType::kLocalPause), "local-pause");
  // A corrupt copy's report carries its step.
  RuntimeReport corrupt;
  corrupt.type = RuntimeReport::Type::kCorrupt;
  corrupt.step = 41;
  const RuntimeReport c = ReportFrom(RoundTrip(MsgType::kReport, ReportBody(corrupt)).body);
  EXPECT_EQ(c.type, RuntimeReport::Type::kCorrupt);
  EXPECT_EQ(c.step, 41u);
  // The application's report, and its agent's heartbeats while it stands paused.
  RuntimeReport paused;
  paused.type = RuntimeReport::Type::kPaused;
  paused.epoch = 7;
  paused.step = 1234;
  const RuntimeReport r = ReportFrom(RoundTrip(MsgType::kReport, ReportBody(paused)).body);
  EXPECT_EQ(r.type, RuntimeReport::Type::kPaused);
  EXPECT_EQ(r.epoch, 7u);
  EXPECT_EQ(r.step, 1234u);
  json bare{{"rt", static_cast<int>(RuntimeReport::Type::kPaused)}};
  EXPECT_NE(Decode(FrameJson(MsgType::kReport, bare)).find("without its epoch and step"),
            std::string::npos);
  Message hb = RoundTrip(MsgType::kHeartbeat,
                         HeartbeatBody(1, 1233, 9, false, {}, {}, PauseNotice{7, 1234, false}));
  auto at = PausedFrom(hb.body);
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(at->epoch, 7u);
  EXPECT_EQ(at->step, 1234u);
  EXPECT_FALSE(PausedFrom(HeartbeatBody(1, 1233, 9)).has_value());
  json half = HeartbeatBody(1, 1233, 9, false, {}, {}, PauseNotice{7, 1234, false});
  half.erase("pze");
  EXPECT_NE(Decode(FrameJson(MsgType::kHeartbeat, half)).find("pause"), std::string::npos);
}

// A C or Fortran application may end (return from main, exit, STOP) while rt-ft's threads still
// send: the message tables must outlive the process's static destructors. A child encodes on a
// thread while its main thread exits; an encoding that fails or crashes makes its status nonzero.
TEST(Codec, EncodesWhileTheProcessExits) {
  for (int round = 0; round < 20; ++round) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      static std::atomic<int64_t> encoded{0};
      std::thread([] {
        RuntimeReport r;
        r.type = RuntimeReport::Type::kSample;
        r.progress.calls = 7;
        while (true) {
          for (MsgType type : {MsgType::kReport, MsgType::kHeartbeat, MsgType::kAck}) {
            const json body = type == MsgType::kReport      ? ReportBody(r)
                              : type == MsgType::kHeartbeat ? HeartbeatBody(1, 2, 3)
                                                            : AckBody(1, Status::Ok());
            if (!EncodeMessage(type, body).ok()) _exit(2);
          }
          encoded.fetch_add(1);
        }
      }).detach();
      while (encoded.load() < 100) std::this_thread::yield();
      exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << "round " << round << ": signal " << WTERMSIG(status);
    ASSERT_EQ(WEXITSTATUS(status), 0) << "round " << round << ": an encoding failed at exit";
  }
}

}  // namespace
}  // namespace rtft::control
