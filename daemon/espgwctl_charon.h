// charon's names for espgw's SAs: espgw knows SPIs, charon knows which IKE_SA and CHILD_SA
// (connection and child config) each SPI belongs to. espgwctl asks charon's VICI socket
// for list-sas, as swanctl --list-sas does, to filter by name (--ike, --child) and to show
// espgw's counters per CHILD_SA under its IKE_SA (`espgwctl children`).
#pragma once

#include <string>
#include <vector>

namespace espgw::ctl {

struct CharonChild {
  std::string name;      // the child config's name
  std::string uniqueid;  // charon's CHILD_SA number
  std::string state;     // INSTALLED, REKEYED, ...
  std::string spi_in;    // "0x" and 8 hex digits, as espgw names SPIs
  std::string spi_out;
};

struct CharonIkeSa {
  std::string name;  // the connection's name
  std::string uniqueid;
  std::string state;
  std::string local_host;
  std::string remote_host;
  std::vector<CharonChild> children;
};

// charon's IKE_SAs named `ike` (all when empty), with their CHILD_SAs named `child` (all
// when empty; an IKE_SA left without children by the filter is left out). Throws
// std::runtime_error or std::system_error naming the socket if charon can't be asked.
std::vector<CharonIkeSa> charon_sas(const std::string& vici_socket, const std::string& ike,
                                    const std::string& child);

}  // namespace espgw::ctl
