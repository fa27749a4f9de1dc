/*
 * sv_proxy_header_parse (supervisor/util/proxy_header.h): the examples of proxy-protocol.txt
 * and PROTOCOLS-3.md §4.4-4.5, round trips through the writer, every prefix of a valid header
 * asking for more, and each refusal's text.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cmocka.h>

#include "supervisor/util/proxy_header.h"

static const uint8_t sig[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d,
                                0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};

static long parse(const void *p, size_t n, sv_proxy_info *pi, const char **why)
{
    *why = NULL;
    return sv_proxy_header_parse(p, n, pi, why);
}

/* Every proper prefix of a valid header asks for more bytes. */
static void prefixes_wait(const uint8_t *h, size_t n)
{
    sv_proxy_info pi;
    const char *why;
    for (size_t k = 0; k < n; k++)
        assert_int_equal(parse(h, k, &pi, &why), 0);
}

static void addr_is(const struct sockaddr_storage *ss, const char *ip, unsigned port)
{
    char text[INET6_ADDRSTRLEN];
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
        assert_int_equal(ntohs(a->sin_port), port);
    } else {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        assert_int_equal(ss->ss_family, AF_INET6);
        inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
        assert_int_equal(ntohs(a->sin6_port), port);
    }
    assert_string_equal(text, ip);
}

static void v1_examples(void **state)
{
    (void)state;
    sv_proxy_info pi;
    const char *why;
    const char *h = "PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\nGET /";
    size_t hl = strlen("PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n");
    assert_int_equal(parse(h, strlen(h), &pi, &why), (long)hl);
    assert_int_equal(pi.version, 1);
    assert_false(pi.local);
    addr_is(&pi.src, "192.168.0.1", 56324);
    addr_is(&pi.dst, "192.168.0.11", 443);
    prefixes_wait((const uint8_t *)h, hl);

    h = "PROXY TCP6 2001:db8::1 ::1 0 65535\r\n";
    assert_int_equal(parse(h, strlen(h), &pi, &why), (long)strlen(h));
    addr_is(&pi.src, "2001:db8::1", 0);
    addr_is(&pi.dst, "::1", 65535);

    h = "PROXY UNKNOWN ffff::1 whatever\r\n";
    assert_int_equal(parse(h, strlen(h), &pi, &why), (long)strlen(h));
    assert_true(pi.local);
    assert_int_equal(parse("PROXY UNKNOWN\r\n", 15, &pi, &why), 15);
    assert_true(pi.local);

    /* the longest line: TCP6 with two full-length addresses is 104 bytes */
    h = "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
        "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
    assert_int_equal(strlen(h), 104);
    assert_int_equal(parse(h, strlen(h), &pi, &why), 104);
}

static void v1_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *in, *why;
    } bad[] = {
        {"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n", "PROXY v1 port is not a decimal 0..65535 without leading zeros"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", "PROXY v1 port is not a decimal 0..65535 without leading zeros"},
        {"PROXY TCP4 1.2.3.4 ::1 1 2\r\n", "PROXY v1 address is not a canonical address of its family"},
        {"PROXY TCP6 2001:DB8::1 ::1 1 2\r\n", "PROXY v1 address is not a canonical address of its family"},
        {"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n", "PROXY v1 address is not a canonical address of its family"},
        {"PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n", "PROXY v1 line has too many fields"},
        {"PROXY TCP4  1.2.3.4 5.6.7.8 1\r\n", "PROXY v1 port is not a decimal 0..65535 without leading zeros"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", "PROXY v1 line has too few fields"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n", "PROXY v1 line has too many fields"},
        {"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n", "PROXY v1 protocol is not TCP4, TCP6 or UNKNOWN"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", "PROXY v1 line ends with a lone LF"},
        {"PROXY TCP4 1.2.3.4\r5.6.7.8 1 2\r\n", "PROXY v1 line holds a lone CR"},
        {"GET / HTTP/1.1\r\n", "no PROXY protocol header (the listener requires one)"},
        {"PROXZ", "no PROXY protocol header (the listener requires one)"},
        {"\x16\x03\x01", "no PROXY protocol header (the listener requires one)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sv_proxy_info pi;
        const char *why;
        assert_int_equal(parse(bad[i].in, strlen(bad[i].in), &pi, &why), -1);
        assert_string_equal(why, bad[i].why);
    }
    /* no CRLF within 107 bytes */
    char longline[200];
    memset(longline, 'a', sizeof longline);
    memcpy(longline, "PROXY UNKNOWN ", 14);
    sv_proxy_info pi;
    const char *why;
    assert_int_equal(parse(longline, 106, &pi, &why), 0);
    assert_int_equal(parse(longline, sizeof longline, &pi, &why), -1);
    assert_string_equal(why, "PROXY v1 line without CRLF in 107 bytes");
}

/* PROTOCOLS-3.md §4.5's example: TCP4 192.0.2.1:56324 -> 198.51.100.2:443. */
static void v2_example_and_round_trips(void **state)
{
    (void)state;
    uint8_t h[64];
    memcpy(h, sig, 12);
    static const uint8_t rest[] = {0x21, 0x11, 0x00, 0x0c, 0xc0, 0x00, 0x02, 0x01, 0xc6, 0x33,
                                   0x64, 0x02, 0xdc, 0x04, 0x01, 0xbb, 'x'};
    memcpy(h + 12, rest, sizeof rest);
    sv_proxy_info pi;
    const char *why;
    assert_int_equal(parse(h, 29, &pi, &why), 28);
    assert_int_equal(pi.version, 2);
    assert_false(pi.local);
    assert_false(pi.datagram);
    addr_is(&pi.src, "192.0.2.1", 56324);
    addr_is(&pi.dst, "198.51.100.2", 443);
    prefixes_wait(h, 28);

    /* the writer's headers read back, both versions, both families */
    struct sockaddr_in6 s6 = {.sin6_family = AF_INET6, .sin6_port = htons(4000)};
    struct sockaddr_in6 d6 = {.sin6_family = AF_INET6, .sin6_port = htons(443)};
    inet_pton(AF_INET6, "2001:db8::7", &s6.sin6_addr);
    inet_pton(AF_INET6, "2001:db8::8", &d6.sin6_addr);
    for (unsigned ver = 1; ver <= 2; ver++) {
        uint8_t out[SV_PROXY_HEADER_MAX];
        size_t n = sv_proxy_header(ver, (struct sockaddr *)&s6, (struct sockaddr *)&d6, out);
        assert_int_equal(parse(out, n, &pi, &why), (long)n);
        assert_int_equal(pi.version, ver);
        addr_is(&pi.src, "2001:db8::7", 4000);
        addr_is(&pi.dst, "2001:db8::8", 443);
        prefixes_wait(out, n);
    }
}

static uint32_t test_crc32c(const uint8_t *p, size_t n)
{
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = crc & 1u ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
    }
    return ~crc;
}

static void v2_local_tlvs_and_refusals(void **state)
{
    (void)state;
    sv_proxy_info pi;
    const char *why;
    uint8_t h[SV_PROXY_READ_MAX + 32];
    memcpy(h, sig, 12);
    /* LOCAL with an IPv4 block and a NOOP TLV: skipped whole, local */
    h[12] = 0x20, h[13] = 0x11, h[14] = 0, h[15] = 12 + 5;
    memset(h + 16, 7, 12);
    h[28] = 0x04, h[29] = 0, h[30] = 2, h[31] = 0, h[32] = 0;
    assert_int_equal(parse(h, 33, &pi, &why), 33);
    assert_true(pi.local);
    /* LOCAL whatever its family byte says (proxy-protocol.txt 2.2: the family is ignored) */
    h[13] = 0x77;
    assert_int_equal(parse(h, 33, &pi, &why), 33);
    assert_true(pi.local);
    /* UDP6 PROXY */
    h[12] = 0x21, h[13] = 0x22, h[15] = 36;
    memset(h + 16, 0, 36);
    h[31] = 1, h[47] = 2; /* ::1 -> ::2 */
    assert_int_equal(parse(h, 52, &pi, &why), 52);
    assert_true(pi.datagram);
    addr_is(&pi.src, "::1", 0);
    addr_is(&pi.dst, "::2", 0);
    /* a CRC32C TLV: right, then wrong */
    h[12] = 0x21, h[13] = 0x11, h[15] = 12 + 7;
    memset(h + 16, 1, 12);
    h[28] = 0x03, h[29] = 0, h[30] = 4;
    memset(h + 31, 0, 4);
    /* CRC32C over the header with the field zeroed (the test's own CRC32C, checked first on
     * the standard check value: "123456789" gives 0xe3069283, RFC 3720 §B.4's polynomial) */
    assert_int_equal(test_crc32c((const uint8_t *)"123456789", 9), 0xe3069283u);
    uint32_t crc = test_crc32c(h, 35);
    h[31] = (uint8_t)(crc >> 24), h[32] = (uint8_t)(crc >> 16), h[33] = (uint8_t)(crc >> 8);
    h[34] = (uint8_t)crc;
    assert_int_equal(parse(h, 35, &pi, &why), 35);
    h[34] ^= 1;
    assert_int_equal(parse(h, 35, &pi, &why), -1);
    assert_string_equal(why, "PROXY v2 CRC32C does not match the header");
    static const struct {
        uint8_t b12, b13;
        unsigned len;
        const char *why;
    } bad[] = {
        {0x11, 0x11, 12, "PROXY v2 version is not 2"},
        {0x22, 0x11, 12, "PROXY v2 command is neither LOCAL nor PROXY"},
        {0x21, 0x13, 12, "PROXY v2 family and protocol are unknown"},
        {0x21, 0x21, 12, "PROXY v2 addresses are longer than the header"},
        {0x21, 0x11, 14, "PROXY v2 TLV runs past the header"},
        {0x21, 0x11, SV_PROXY_READ_MAX, "PROXY v2 header is longer than 4096 bytes"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        h[12] = bad[i].b12, h[13] = bad[i].b13;
        h[14] = (uint8_t)(bad[i].len >> 8), h[15] = (uint8_t)bad[i].len;
        memset(h + 16, 0, sizeof h - 16);
        assert_int_equal(parse(h, 16 + bad[i].len, &pi, &why), -1);
        assert_string_equal(why, bad[i].why);
    }
    /* a TLV whose length runs past the header */
    h[12] = 0x21, h[13] = 0x11, h[14] = 0, h[15] = 12 + 3;
    h[28] = 0x01, h[29] = 0, h[30] = 1;
    assert_int_equal(parse(h, 31, &pi, &why), -1);
    assert_string_equal(why, "PROXY v2 TLV runs past the header");
    /* the signature's first bytes followed by something else */
    assert_int_equal(parse("\r\n\r\nX", 5, &pi, &why), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(v1_examples),
        cmocka_unit_test(v1_refusals),
        cmocka_unit_test(v2_example_and_round_trips),
        cmocka_unit_test(v2_local_tlvs_and_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
