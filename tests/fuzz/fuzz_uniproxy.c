/*
 * Fuzz harness: what a UniProxy panel sends back (panel/uniproxy.c, panel/model.c in the
 * non-strict mode used for HTTP answers). The first byte picks a status class; the rest is the
 * body, run through the report acknowledgement check, the error-envelope reader, and, when it
 * is JSON, the config, user and alivelist parsers.
 * Checks: results are 0 or negative with a message; a parsed user list holds at most
 * PN_USERS_MAX users with non-NULL uuids; a parsed node has a port; alivelist counts fit; a body
 * pn_users_scan() takes (issue 13) is JSON that pn_users_parse() reads, in either mode, as the
 * same list, and one it leaves gives an empty list; pn_users_parse_text() (issue 33) accepts
 * what pn_users_parse() accepts, as the same list, and refuses what jansson refuses.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "panel/uniproxy.h"
#include "tests/fuzz/fuzz.h"

static void parse_bodies(const json_t *j)
{
    sv_error err = {0};
    pn_node node;
    int rc = pn_node_parse(j, "shadowsocks", 0, &node, &err);
    FUZZ_CHECK(rc <= 0);
    if (rc == 0) {
        FUZZ_CHECK(node.server_port > 0 && node.protocol != NULL);
        pn_node_free(&node);
    } else {
        FUZZ_CHECK(err.msg[0] != '\0');
    }
    pn_users users;
    rc = pn_users_parse(j, 0, &users, &err);
    FUZZ_CHECK(rc <= 0);
    if (rc == 0) {
        FUZZ_CHECK(users.n <= PN_USERS_MAX);
        for (size_t i = 0; i < users.n; i++)
            FUZZ_CHECK(users.users[i].uuid != NULL);
        pn_users_free(&users);
    }
    pn_alive_count *items = NULL;
    size_t n = 0;
    rc = pn_uniproxy_parse_alivelist(j, &items, &n, &err);
    FUZZ_CHECK(rc <= 0);
    FUZZ_CHECK(rc == 0 || (items == NULL && n == 0));
    FUZZ_CHECK(n <= PN_USERS_MAX);
    free(items);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1u << 20))
        return 0;
    static const long statuses[] = {200, 201, 204, 304, 400, 422, 500, 502};
    long status = statuses[data[0] % 8];
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    sv_error err = {0};
    int rc = pn_uniproxy_check_ack(status, body, len, &err);
    FUZZ_CHECK(rc == 0 || (rc == -EPROTO && err.msg[0] != '\0'));
    FUZZ_CHECK(rc != 0 || (status >= 200 && status < 300));
    FUZZ_CHECK(pn_uniproxy_error(status, body, len, &err) == -EPROTO);
    FUZZ_CHECK(strlen(err.msg) < sizeof err.msg);
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    if (j != NULL)
        parse_bodies(j);
    pn_users scanned, ref, ref_users = {0};
    rc = pn_users_scan(body, len, &scanned);
    FUZZ_CHECK(rc == 0 || rc == 1 || rc == -ENOMEM);
    FUZZ_CHECK(rc == 0 || (scanned.users == NULL && scanned.n == 0));
    FUZZ_CHECK(rc != 0 || j != NULL);
    for (unsigned flags = 0; rc == 0 && flags <= PN_PARSE_STRICT; flags += PN_PARSE_STRICT) {
        FUZZ_CHECK(pn_users_parse(j, flags, &ref, &err) == 0);
        FUZZ_CHECK(pn_users_equal(&scanned, &ref));
        pn_users_free(&ref);
    }
    pn_users_free(&scanned);
    for (unsigned flags = 0; flags <= PN_PARSE_STRICT; flags += PN_PARSE_STRICT) {
        pn_users text; /* issue 33: one user at a time, as the tree's parser reads them */
        rc = pn_users_parse_text(body, len, flags, &text, &err);
        FUZZ_CHECK(rc <= 0 && (rc == 0 || err.msg[0] != '\0'));
        FUZZ_CHECK(rc == 0 || (text.users == NULL && text.n == 0));
        int want = j != NULL ? pn_users_parse(j, flags, &ref_users, &err) : -EBADMSG;
        FUZZ_CHECK((rc == 0) == (want == 0));
        FUZZ_CHECK(rc != 0 || pn_users_equal(&text, &ref_users));
        pn_users_free(&text);
        pn_users_free(&ref_users);
    }
    json_decref(j);
    return 0;
}
