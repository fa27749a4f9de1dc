/*
 * Digit values of the text encodings that keys, ids and escapes arrive in (hex: UUIDs, short
 * ids, percent-escapes; base64 RFC 4648 §4 and its URL alphabet §5: Shadowsocks 2022 keys,
 * REALITY keys). One definition for every parser of outside text.
 */
#ifndef SV_UTIL_DIGITS_H
#define SV_UTIL_DIGITS_H

#include <stdbool.h>

/** Value 0..15 of hex digit @p c (either case), or -1 when @p c is not one. */
static inline int sv_hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/** Value 0..63 of base64 digit @p c, in the URL alphabet ('-', '_') when @p url, else the
 *  standard one ('+', '/'); -1 for anything else, padding '=' included (RFC 4648 §4, §5). */
static inline int sv_b64_digit(int c, bool url)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == (url ? '-' : '+'))
        return 62;
    if (c == (url ? '_' : '/'))
        return 63;
    return -1;
}

#endif
