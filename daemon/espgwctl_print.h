// espgwctl's tables: what it prints for the control socket's answers (list-sas,
// list-policies, stats), with the counters' names from the daemon's registry.
#pragma once

#include <string>
#include <vector>

#include "vici_bridge/vici_message.h"

namespace espgw::ctl {

std::string value_or(const vici::Section& section, const char* key, const char* fallback = "-");
void print_table(const std::vector<std::vector<std::string>>& rows);
// The SAs' counter columns: outbound's, then inbound's that outbound lacks.
std::vector<std::string> sa_counter_names();
// One row per SA of list-sas's "sas" section, under the header sa_header() returns.
std::vector<std::string> sa_header();
std::vector<std::string> sa_row(const vici::Section& sa);
void print_sas(const vici::Message& response);
void print_policies(const vici::Message& response);
void print_stats(const vici::Message& response);

}  // namespace espgw::ctl
