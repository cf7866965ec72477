// Event deltas (delta.h): built by the coordinator against the membership it broadcast last,
// applied by each agent to the membership it holds.
#include "control/wire/delta.h"

#include "control/wire/messages.h"

namespace rtft::control {
namespace {

using json = nlohmann::json;

class Fnv {
 public:
  void Add(int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h_ ^= static_cast<uint64_t>(v >> (8 * i)) & 0xff;
      h_ *= 0x100000001b3ULL;
    }
  }
  template <typename T>
  void AddList(const std::vector<T>& v) {
    Add(static_cast<int64_t>(v.size()));
    for (const T& e : v) Add(static_cast<int64_t>(e));
  }
  uint64_t value() const { return h_ & (~uint64_t{0} >> 1); }

 private:
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

std::vector<int32_t> Ints(const json& v) {
  std::vector<int32_t> out;
  out.reserve(v.size());
  for (const auto& e : v) out.push_back(e.get<int32_t>());
  return out;
}

}  // namespace

uint64_t MembershipHash(const Membership& m) {
  Fnv f;
  f.Add(static_cast<int64_t>(m.epoch));
  f.Add(m.world_size);
  f.AddList(m.rank_to_slot);
  f.AddList(m.spares);
  f.AddList(m.retired);
  f.AddList(m.slot_roles);
  f.AddList(m.devices);
  return f.value();
}

json EventDeltaBody(const ControlEvent& e, const Membership& base) {
  const Membership& m = e.membership;
  json rpos = json::array(), rslot = json::array(), spos = json::array(), srole = json::array();
  for (size_t r = 0; r < m.rank_to_slot.size(); ++r) {
    if (r < base.rank_to_slot.size() && base.rank_to_slot[r] == m.rank_to_slot[r]) continue;
    rpos.push_back(r);
    rslot.push_back(m.rank_to_slot[r]);
  }
  for (size_t s = 0; s < m.slot_roles.size(); ++s) {
    if (s < base.slot_roles.size() && base.slot_roles[s] == m.slot_roles[s]) continue;
    spos.push_back(s);
    srole.push_back(static_cast<int>(m.slot_roles[s]));
  }
  json body{{"ev", static_cast<int>(e.type)},
            {"epoch", m.epoch},
            {"base", base.epoch},
            {"hash", MembershipHash(m)},
            {"ws", m.world_size},
            {"nslots", m.slot_roles.size()},
            {"rpos", rpos},
            {"rslot", rslot},
            {"spos", spos},
            {"srole", srole},
            {"spares", m.spares},
            {"retired", m.retired},
            {"failed", e.failed_ranks},
            {"reason", e.reason.substr(0, kMaxTextBytes)},
            {"ckpt", e.checkpoint_first},
            {"xcode", e.exit_code}};
  // The devices travel with the ranks: the entries that differ from the base's.
  if (!m.devices.empty() || !base.devices.empty()) {
    json dpos = json::array(), dval = json::array();
    for (size_t r = 0; r < m.devices.size(); ++r) {
      if (r < base.devices.size() && base.devices[r] == m.devices[r]) continue;
      dpos.push_back(r);
      dval.push_back(m.devices[r]);
    }
    body["ndevs"] = m.devices.size();
    body["dpos"] = std::move(dpos);
    body["dval"] = std::move(dval);
  }
  return body;
}

StatusOr<ControlEvent> EventFromDelta(const json& b, const Membership& have, SlotId me) {
  const uint64_t base = b["base"].get<uint64_t>();
  if (have.epoch != base)
    return Status::FailedPrecondition("a delta against epoch " + std::to_string(base) +
                                      ", this agent holds epoch " + std::to_string(have.epoch));
  ControlEvent e;
  e.type = static_cast<ControlEvent::Type>(b["ev"].get<int>());
  Membership& m = e.membership;
  m.epoch = b["epoch"].get<uint64_t>();
  m.world_size = b["ws"].get<int32_t>();
  // Sizes and positions were checked against the schema's bounds (CheckMessageSemantics).
  m.rank_to_slot = have.rank_to_slot;
  m.rank_to_slot.resize(static_cast<size_t>(m.world_size), -1);
  const auto& rpos = b["rpos"];
  const auto& rslot = b["rslot"];
  for (size_t i = 0; i < rpos.size(); ++i)
    m.rank_to_slot[rpos[i].get<size_t>()] = rslot[i].get<SlotId>();
  m.slot_roles = have.slot_roles;
  m.slot_roles.resize(b["nslots"].get<size_t>(), Role::kRetired);
  const auto& spos = b["spos"];
  const auto& srole = b["srole"];
  for (size_t i = 0; i < spos.size(); ++i)
    m.slot_roles[spos[i].get<size_t>()] = static_cast<Role>(srole[i].get<int>());
  m.spares = Ints(b["spares"]);
  m.retired = Ints(b["retired"]);
  m.devices = have.devices;
  if (b.contains("ndevs")) {
    m.devices.resize(b["ndevs"].get<size_t>(), -1);
    const auto& dpos = b["dpos"];
    const auto& dval = b["dval"];
    for (size_t i = 0; i < dpos.size(); ++i)
      m.devices[dpos[i].get<size_t>()] = dval[i].get<int32_t>();
  }
  if (MembershipHash(m) != b["hash"].get<uint64_t>())
    return Status::DataLoss("the epoch " + std::to_string(m.epoch) +
                            " delta does not hash to the membership it names");
  e.failed_ranks = Ints(b["failed"]);
  e.reason = b["reason"].get<std::string>();
  e.checkpoint_first = b["ckpt"].get<bool>();
  e.exit_code = b["xcode"].get<int32_t>();
  e.assignment.role = RoleOfSlot(m, me);
  e.assignment.rank = RankOfSlot(m, me);
  e.assignment.epoch = m.epoch;
  e.assignment.world_size = m.world_size;
  const LogicalRank r = e.assignment.rank;
  if (r >= 0 && static_cast<size_t>(r) < m.devices.size()) e.assignment.device = m.devices[r];
  return e;
}

json SyncBody(SlotId slot, uint64_t epoch) { return json{{"slot", slot}, {"epoch", epoch}}; }

}  // namespace rtft::control
