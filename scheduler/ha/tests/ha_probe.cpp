// ha_probe: one contender of an etcd election, for tests/ha/test_election.py.
//
//   ha_probe campaign --endpoints URL,URL --ca F --cert F --key F --key-name K --name N
//                     [--ttl S] [--wait-s S] [--hold-s S] [--resign]
//   ha_probe observe  --endpoints ... --key-name K
//   ha_probe watch    --endpoints ... --key-name K [--wait-s S]
//
// campaign tries until it wins or --wait-s passes, then keeps its lease
// alive until it loses, --hold-s passes (then --resign revokes the lease) or
// it is killed. Each happening is one JSON line on stdout, flushed:
//   {"event":"held","holder":"a","term":7}      someone else leads
//   {"event":"won","term":9,"name":"b"}
//   {"event":"lost","reason":"..."}             exit 4
//   {"event":"error","message":"..."}           the last error at --wait-s: exit 2
//   {"event":"resigned"}                         exit 0
// Exit 3: still held by another at --wait-s.

#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ha/election.hpp"
#include "ha/etcd_client.hpp"

namespace {

using topo::ha::Election;
using Clock = std::chrono::steady_clock;

void Emit(const nlohmann::json& j) { std::cout << j.dump() << std::endl; }

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, ',')) {
    if (!part.empty()) out.push_back(part);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"One contender of an etcd election (tests only)"};
  app.require_subcommand(1);
  std::string endpoints, ca, cert, key, key_name, name = "probe";
  int ttl_s = 2;
  double wait_s = 10, hold_s = 0;
  int timeout_ms = 1000;
  bool resign = false;
  auto common = [&](CLI::App* c) {
    c->add_option("--endpoints", endpoints, "etcd members, comma separated")->required();
    c->add_option("--ca", ca)->required();
    c->add_option("--cert", cert)->required();
    c->add_option("--key", key)->required();
    c->add_option("--key-name", key_name, "the campaign key")->required();
    c->add_option("--timeout-ms", timeout_ms, "per request and endpoint");
  };
  CLI::App* campaign = app.add_subcommand("campaign", "campaign, then hold the leadership");
  common(campaign);
  campaign->add_option("--name", name);
  campaign->add_option("--ttl", ttl_s);
  campaign->add_option("--wait-s", wait_s, "give up campaigning after this long");
  campaign->add_option("--hold-s", hold_s, "lead this long, then stop (0: until lost or killed)");
  campaign->add_flag("--resign", resign, "revoke the lease when --hold-s ends");
  CLI::App* observe = app.add_subcommand("observe", "print who holds the key");
  common(observe);
  CLI::App* watch = app.add_subcommand("watch", "wait for a change of the key");
  common(watch);
  watch->add_option("--wait-s", wait_s, "wait at most this long");
  CLI11_PARSE(app, argc, argv);

  auto client = topo::ha::EtcdClient::Create({.endpoints = Split(endpoints),
                                              .ca_file = ca,
                                              .cert_file = cert,
                                              .key_file = key,
                                              .timeout = std::chrono::milliseconds(timeout_ms)});
  if (!client.ok()) {
    Emit({{"event", "error"}, {"message", client.message()}});
    return 2;
  }
  if (watch->parsed()) {
    // {"event":"watching"} once the key was read, then
    // {"event":"changed"} or {"event":"quiet"} (--wait-s passed).
    // From just after a read of the key, so no change after it is missed.
    auto r = client.value()->Range({key_name, "", 0, 0});
    if (!r.ok()) {
      Emit({{"event", "error"}, {"message", r.message()}});
      return 2;
    }
    Emit({{"event", "watching"}, {"revision", r.value().header.revision}});
    auto w = client.value()->Watch(key_name, "", r.value().header.revision + 1,
                                   std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000)));
    if (!w.ok()) {
      Emit({{"event", "error"}, {"message", w.message()}});
      return 2;
    }
    Emit({{"event", w.value().changed ? "changed" : "quiet"}, {"revision", w.value().revision}});
    return 0;
  }
  Election election(client.value().get(), {.key = key_name, .name = name, .ttl_s = ttl_s});
  if (observe->parsed()) {
    auto o = election.Observe();
    if (!o.ok()) {
      Emit({{"event", "error"}, {"message", o.message()}});
      return 2;
    }
    Emit({{"holder", o.value().holder}, {"term", o.value().term}});
    return 0;
  }

  const auto give_up = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(wait_s));
  std::string last_holder;
  for (;;) {
    auto c = election.Campaign(Clock::now());
    if (c.ok() && c.value().won) {
      Emit({{"event", "won"}, {"term", c.value().term}, {"name", name}});
      break;
    }
    if (c.ok() && c.value().holder != last_holder) {
      last_holder = c.value().holder;
      Emit({{"event", "held"}, {"holder", c.value().holder}, {"term", c.value().term}});
    }
    if (Clock::now() >= give_up) {
      if (!c.ok()) {
        Emit({{"event", "error"}, {"message", c.message()}});
        return 2;
      }
      return 3;
    }
    std::this_thread::sleep_for(election.RenewInterval() / 2);
  }

  const auto won_at = Clock::now();
  for (;;) {
    std::this_thread::sleep_for(election.RenewInterval());
    if (hold_s > 0 && Clock::now() - won_at >= std::chrono::duration<double>(hold_s)) {
      if (resign) {
        if (auto s = election.Resign(); !s.ok()) {
          Emit({{"event", "error"}, {"message", s.message()}});
          return 2;
        }
        Emit({{"event", "resigned"}});
      }
      return 0;
    }
    if (auto s = election.Renew(Clock::now()); !s.ok()) {
      Emit({{"event", "lost"}, {"reason", election.lost_reason()}, {"message", s.message()}});
      return 4;
    }
  }
}
