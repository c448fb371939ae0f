// The client's and the election's checks of their inputs (no etcd needed;
// tests/ha/test_election.py runs them against real members).

#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "ha/election.hpp"
#include "ha/etcd_client.hpp"

namespace topo::ha {
namespace {

TEST_CASE("etcd endpoints: https://HOST:PORT only") {
  auto ok = ParseEtcdEndpoint("https://127.0.0.1:2379");
  REQUIRE(ok.ok());
  CHECK(ok.value().host == "127.0.0.1");
  CHECK(ok.value().port == "2379");
  CHECK(ok.value().host_is_ip);
  auto v6 = ParseEtcdEndpoint("https://[::1]:2379/");
  REQUIRE(v6.ok());
  CHECK(v6.value().host == "::1");
  CHECK(v6.value().ToString() == "https://[::1]:2379");
  auto name = ParseEtcdEndpoint("https://etcd-0.example:2379");
  REQUIRE(name.ok());
  CHECK_FALSE(name.value().host_is_ip);

  CHECK(ParseEtcdEndpoint("http://127.0.0.1:2379").message().find("plain HTTP is refused") !=
        std::string::npos);
  CHECK(ParseEtcdEndpoint("127.0.0.1:2379").message().find("no https:// scheme") !=
        std::string::npos);
  CHECK(ParseEtcdEndpoint("https://127.0.0.1").message().find("no :PORT") != std::string::npos);
  CHECK(ParseEtcdEndpoint("https://127.0.0.1:0").message().find("1-65535") != std::string::npos);
  CHECK(ParseEtcdEndpoint("https://127.0.0.1:99999").message().find("1-65535") !=
        std::string::npos);
  CHECK(ParseEtcdEndpoint("https://h:1/v3").message().find("no path") != std::string::npos);
  CHECK(ParseEtcdEndpoint("https://u@h:1").message().find("user info") != std::string::npos);
  CHECK(ParseEtcdEndpoint("https://:1").message().find("empty host") != std::string::npos);
  CHECK(ParseEtcdEndpoint("https://[::1:1").message().find("unclosed") != std::string::npos);
  CHECK(ParseEtcdEndpoint(std::string(400, 'a')).message().find("300") != std::string::npos);
}

TEST_CASE("EtcdClient::Create names the option that is wrong") {
  const std::string pem = "/tmp/topo_ha_test_not_a_cert.pem";
  {
    std::ofstream f(pem);
    f << "hello\n";
  }
  EtcdClientOptions o{
      .endpoints = {"https://127.0.0.1:2379"}, .ca_file = pem, .cert_file = pem, .key_file = pem};
  CHECK(EtcdClient::Create(o).message().find("ca_file " + pem + ": no '-----BEGIN CERTIFICATE") ==
        0);
  o.ca_file = "/nonexistent/ca.pem";
  CHECK(EtcdClient::Create(o).message().find("ca_file /nonexistent/ca.pem: No such file") == 0);
  o.ca_file = "";
  CHECK(EtcdClient::Create(o).message().find("ca_file is required") == 0);
  o.endpoints = {};
  CHECK(EtcdClient::Create(o).message().find("endpoints: none given") == 0);
  o.endpoints = {"http://127.0.0.1:2379"};
  CHECK(EtcdClient::Create(o).message().find("plain HTTP") != std::string::npos);
  o.endpoints = {"https://127.0.0.1:2379"};
  o.timeout = std::chrono::milliseconds(0);
  CHECK(EtcdClient::Create(o).message().find("timeout: 0 ms") == 0);
  std::remove(pem.c_str());
}

TEST_CASE("Election::Validate: key, name and TTL bounds") {
  CHECK(Election::Validate({.key = "/t/leader", .name = "a", .ttl_s = 5}).ok());
  CHECK(Election::Validate({.key = "/t/leader", .name = "a", .ttl_s = 1}).message() ==
        "ha_lease_ttl_s: 1 is outside 2..60 seconds");
  CHECK(Election::Validate({.key = "/t/leader", .name = "a", .ttl_s = 61})
            .message()
            .find("ha_lease_ttl_s: 61") == 0);
  CHECK(Election::Validate({.key = "", .name = "a", .ttl_s = 5}).message().find("election key") ==
        0);
  CHECK(Election::Validate({.key = "/k", .name = "", .ttl_s = 5}).message().find("ha_name") == 0);
  CHECK(Election::Validate({.key = "/k", .name = std::string(1025, 'n'), .ttl_s = 5})
            .message()
            .find("ha_name") == 0);
}

}  // namespace
}  // namespace topo::ha
