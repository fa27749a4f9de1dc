/*
 * The HTTP/1.1 upgrade request that the WebSocket (ws.c, PROTOCOLS.md §8.1) and HTTPUpgrade
 * (httpupgrade.c, PROTOCOLS-2.md §4.1) layers read before their stream starts: one parser for
 * both. Sans-I/O, no allocation: the parsed fields point into the caller's head buffer.
 */
#ifndef SV_TRANSPORT_HTTP_HEAD_H
#define SV_TRANSPORT_HTTP_HEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Bytes of the caller's head buffer (not NUL-terminated). */
typedef struct sv_http_span {
    const char *p;
    size_t n;
} sv_http_span;

/** The parts of an upgrade request the layers check; has_* tells whether a header came. */
typedef struct sv_http_upgrade_req {
    sv_http_span path; /**< the request target without its query ("?..." dropped) */
    sv_http_span host, upgrade, connection, version, key, protocol;
    sv_http_span xff;     /**< X-Forwarded-For: the right-most element of the last such line
                               (the address the nearest proxy added), trimmed */
    sv_http_span real_ip; /**< X-Real-IP, trimmed */
    bool has_host, has_upgrade, has_connection, has_version, has_key, has_protocol;
    bool has_xff, has_real_ip;
} sv_http_upgrade_req;

/** Bytes of room for a forwarded client address text, NUL included ("[v6]:port" fits). */
#define SV_HTTP_FORWARDED_MAX 64u

/**
 * Parse @p n bytes at @p p: a request line and headers ending with an empty line (CRLF line
 * ends). Header names are matched case-insensitively, values trimmed of spaces and tabs; the
 * last of a repeated header wins. Fields of *@p r point into @p p.
 * @return true for an HTTP/1.1 GET request with well-formed header lines, false otherwise.
 */
bool sv_http_parse_upgrade(const char *p, size_t n, sv_http_upgrade_req *r);

/**
 * The client address a forwarding proxy named in @p r: X-Forwarded-For's right-most element,
 * else X-Real-IP (nodes[].trusted_forwarders; Xray-core's sockopt trustedXForwardedFor reads
 * the same headers). Copied NUL-terminated into @p out (SV_HTTP_FORWARDED_MAX bytes). Not
 * checked to be an address here.
 * @return true when one was copied; false when neither header came, its value is empty or does
 *         not fit (then @p out is "").
 */
bool sv_http_forwarded(const sv_http_upgrade_req *r, char out[SV_HTTP_FORWARDED_MAX]);

/** Is @p a equal to the C string @p b, ignoring ASCII case? */
bool sv_http_span_ieq(sv_http_span a, const char *b);

/** Does the comma-separated list @p v hold @p token (case-insensitive, RFC 9110 §5.6.1)? */
bool sv_http_has_token(sv_http_span v, const char *token);

/** Does the Host header value @p v name @p want (case-insensitive; a port, ":443" or after
 *  "]" of an IPv6 literal, is ignored)? */
bool sv_http_host_matches(sv_http_span v, const char *want);

/** What sv_http_head_collect() found. */
typedef enum sv_http_head_state {
    SV_HTTP_HEAD_MORE = 0,     /**< no empty line yet: feed more bytes */
    SV_HTTP_HEAD_COMPLETE = 1, /**< the head ends with its empty line ("\r\n\r\n") */
    SV_HTTP_HEAD_NOT_HTTP = 2, /**< does not start with "GET ", or @p max bytes without an end */
} sv_http_head_state;

/**
 * Collect an upgrade request head, shared by the WebSocket and HTTPUpgrade layers: append up to
 * the end of the head (or up to @p max bytes in all) of the @p n bytes at @p in to *@p head
 * (allocated here at @p max bytes on first use; the caller frees it), *@p head_len bytes long.
 * *@p used: how many bytes of @p in were taken (bytes after the head stay with the caller).
 * @return a sv_http_head_state, or -ENOMEM (nothing taken).
 */
int sv_http_head_collect(uint8_t **head, size_t *head_len, size_t max, const uint8_t *in,
                         size_t n, size_t *used);

#endif
