/*
 * A TLS target for unit tests (issue 11): an OpenSSL 3 server that answers a ClientHello in
 * memory, as the site behind a REALITY node does (PROTOCOLS-2.md §1.5 step 1). Shared by
 * test_reality and test_tls13s; failures are cmocka assertions.
 */
#ifndef KATANA_TESTS_UNIT_TLS_TARGET_H
#define KATANA_TESTS_UNIT_TLS_TARGET_H

#include <stddef.h>
#include <stdint.h>

/**
 * Answer @p records (TLS records carrying a ClientHello, as a client sent them) with an OpenSSL
 * 3 server holding a fresh self-signed P-256 certificate whose CN is @p cn (the certificate's
 * size follows the name's length).
 * @return the length of the server's first flight (ServerHello .. Finished), copied into
 *         @p out (@p cap bytes); the calling test fails if there is none.
 */
size_t tls_target_answer(const char *cn, const uint8_t *records, size_t len, uint8_t *out,
                         size_t cap);

/**
 * Split @p n bytes of TLS records at @p f: the wire size (header included) of each of the first
 * @p max complete or partial records goes into @p sizes. @return how many were written.
 */
size_t tls_record_sizes(const uint8_t *f, size_t n, size_t *sizes, size_t max);

#endif
