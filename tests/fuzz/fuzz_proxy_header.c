/*
 * Fuzz harness: the PROXY protocol header reader (supervisor/util/proxy_header.h), fed what a
 * connection might send first. Seeds in fuzz_proxy_header.in: version 1 lines (TCP4, TCP6,
 * UNKNOWN, the longest), version 2 headers (TCP4, UDP6, LOCAL with TLVs, a CRC32C TLV), and
 * near misses.
 * Checks: never a crash; a header's length is within the input and SV_PROXY_READ_MAX; the
 * verdict on the header's own bytes is the verdict on any input they start (a reader may stop
 * at the header); every shorter prefix of an accepted header asks for more; "need more" never
 * holds more than the bound; an error always says why; an address given is IPv4 or IPv6.
 */
#include "config.h"

#include <string.h>

#include "supervisor/util/proxy_header.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sv_proxy_info pi;
    const char *why = NULL;
    long n = sv_proxy_header_parse(data, size, &pi, &why);
    FUZZ_CHECK(n >= -1 && n <= (long)size && n <= SV_PROXY_READ_MAX);
    if (n < 0) {
        FUZZ_CHECK(why != NULL && why[0] != '\0');
        return 0;
    }
    if (n == 0) {
        FUZZ_CHECK(size < SV_PROXY_READ_MAX);
        return 0;
    }
    FUZZ_CHECK(pi.version == 1 || pi.version == 2);
    if (!pi.local) {
        FUZZ_CHECK(pi.src.ss_family == AF_INET || pi.src.ss_family == AF_INET6);
        FUZZ_CHECK(pi.dst.ss_family == pi.src.ss_family);
    }
    sv_proxy_info again;
    FUZZ_CHECK(sv_proxy_header_parse(data, (size_t)n, &again, &why) == n);
    FUZZ_CHECK(again.version == pi.version && again.local == pi.local &&
               memcmp(&again.src, &pi.src, sizeof pi.src) == 0 &&
               memcmp(&again.dst, &pi.dst, sizeof pi.dst) == 0);
    for (size_t k = 0; k < (size_t)n; k++)
        FUZZ_CHECK(sv_proxy_header_parse(data, k, &again, &why) == 0);
    return 0;
}
