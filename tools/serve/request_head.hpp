// A request's head as it arrived (GatedServer::request_head), for what cpp-httplib 0.11's header
// parser lets through or hides: it keeps a name with whitespace before the colon
// ("Transfer-Encoding : chunked") and an obs-fold line that holds a colon as oddly named headers,
// and drops a line without a colon or with an empty value. cpp-httplib still parses the request;
// this only checks its header lines and reads values it dropped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace capsule::serve {

/// Why the head's header lines are malformed (RFC 9112 5.1, 5.2), or "" when they are not: a
/// line that starts with whitespace (obs-fold), has no colon, or whose field name is not a token
/// (RFC 9110 5.6.2; whitespace before the colon).
std::string malformed_header_line(std::string_view head);

/// Whether two header field names are the same (ASCII case-insensitive, RFC 9110 5.1).
bool same_name(std::string_view a, std::string_view b);

/// The values of every header line named `name` (case-insensitive), without the whitespace
/// around them, in order; "" for a line with an empty value.
std::vector<std::string_view> header_values(std::string_view head, std::string_view name);

}  // namespace capsule::serve
